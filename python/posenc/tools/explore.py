"""Figures that explain positional encodings, drawn from libposenc's own numbers.

    python -m posenc.tools.explore decay         [--bases 10000,500000] [--alibi] -o decay.png
    python -m posenc.tools.explore heatmap       [--positions 256 --d-model 128] -o heatmap.png
    python -m posenc.tools.explore scaling       --model llama3-8b --target-context 65536 -o scaling.png
    python -m posenc.tools.explore scaling       --hf-config config.json --target-context 131072 -o s.svg
    python -m posenc.tools.explore extrapolation --model llama2-7b --target-context 16384 -o extra.png

Every number in a figure comes from the binding (posenc.RopeCache.inv_freq,
RopeCache.apply_, posenc.sinusoidal_table, posenc.sinusoidal_add_,
posenc.alibi_slopes, posenc.alibi_add_bias_), never from a re-implementation.
The functions that produce the numbers (*_numbers) are separate from the ones
that draw (draw_*), so tests can check the numbers without matplotlib.

Figures
- decay: mean q.k against relative distance. The same random vector x (one
  per pair, N(0,1) entries) is the query at position p+delta and the key at
  position p: for RoPE it is rotated by the library at both positions; for
  sinusoidal it is scaled by 1/sqrt(2) (so |q|^2 matches RoPE's) and the
  library's table is added at both positions. Independent zero-mean q and k
  would average to 0 at every distance, which shows nothing; "the same content
  at two distances" is the quantity whose decay RoPE is known for. --alibi
  overlays ALiBi's bias -m_h * delta (library slopes) on a second axis.
- heatmap: the sinusoidal table, positions x dimensions; the stripes widen
  with the dimension index because the wavelength 2*pi*base^(2i/d) grows
  geometrically.
- scaling: for each frequency index i of a model, the wavelength 2*pi/inv_freq
  before and after each scaling method (linear/PI, static NTK, dynamic NTK at
  the target context, YaRN, Llama-3, LongRoPE when the model has factors),
  and the stretch original/scaled (1 = left alone, s = interpolated by the
  full factor). The original and target context lengths are marked.
- extrapolation: full turns L*inv_freq/(2*pi) each frequency makes at the
  training context and at the target context. Frequencies that never completed
  a turn in training meet angles at the target they never saw: the reason
  naive RoPE fails beyond the training context.
"""
import argparse
import copy
import json
import math
import os
import sys

import numpy as np

import posenc

__all__ = [
    "PRESETS", "ModelSpec", "model_spec", "decay_numbers", "alibi_numbers",
    "heatmap_numbers", "stripe_widths", "scaling_methods", "scaling_numbers",
    "extrapolation_numbers", "draw_decay", "draw_heatmap", "draw_scaling",
    "draw_extrapolation", "main",
]

TWO_PI = 2.0 * math.pi

# ---------------------------------------------------------------------------
# Model presets: the RoPE fields of each model's published config.json.
# "context" is the pre-extension (training) context: original_max_position_
# embeddings when the model ships a rope_scaling, else max_position_embeddings.
# ---------------------------------------------------------------------------

# Phi-3.5-mini-instruct (128k) LongRoPE factors, rotary_dim/2 = 48 each, as
# published in its config.json.
_PHI35_LONG = [
    1.0800000429153442, 1.1100000143051147, 1.1399999856948853, 1.340000033378601,
    1.5899999141693115, 1.600000023841858, 1.6200000047683716, 2.620000123977661,
    3.2300000190734863, 3.2300000190734863, 4.789999961853027, 7.400000095367432,
    7.700000286102295, 9.09000015258789, 12.199999809265137, 17.670000076293945,
    24.46000099182129, 28.57000160217285, 30.420001983642578, 30.840002059936523,
    32.590003967285156, 32.93000411987305, 42.320003509521484, 44.96000289916992,
    50.340003967285156, 50.45000457763672, 57.55000305175781, 57.93000411987305,
    58.21000289916992, 60.1400032043457, 62.61000442504883, 62.62000274658203,
    62.71000289916992, 63.1400032043457, 63.1400032043457, 63.77000427246094,
    63.93000411987305, 63.96000289916992, 63.970001220703125, 64.02999877929688,
    64.06999969482422, 64.08000183105469, 64.12000274658203, 64.41000366210938,
    64.4800033569336, 64.51000213623047, 64.52999877929688, 64.83999633789062,
]
_PHI35_SHORT = [
    1.0, 1.0199999809265137, 1.0299999713897705, 1.0299999713897705,
    1.0499999523162842, 1.0499999523162842, 1.0499999523162842, 1.0499999523162842,
    1.0499999523162842, 1.0699999332427979, 1.0999999046325684, 1.1099998950958252,
    1.1599998474121094, 1.1599998474121094, 1.1699998378753662, 1.2899998426437378,
    1.339999794960022, 1.679999828338623, 1.7899998426437378, 1.8199998140335083,
    1.8499997854232788, 1.8799997568130493, 1.9099997282028198, 1.9399996995925903,
    1.9899996519088745, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346,
    2.0199997425079346, 2.0199997425079346, 2.0199997425079346, 2.0299997329711914,
    2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914,
    2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914,
    2.0799996852874756, 2.0899996757507324, 2.189999580383301, 2.2199995517730713,
    2.5899994373321533, 2.729999542236328, 2.749999523162842, 2.8399994373321533,
]

# Phi-3-mini-128k-instruct LongRoPE factors ("su" in its config.json), 48 each.
_PHI3_LONG = [
    1.0299999713897705, 1.0499999523162842, 1.0499999523162842, 1.0799999237060547,
    1.2299998998641968, 1.2299998998641968, 1.2999999523162842, 1.4499999284744263,
    1.5999999046325684, 1.6499998569488525, 1.8999998569488525, 2.859999895095825,
    3.68999981880188, 5.419999599456787, 5.489999771118164, 5.489999771118164,
    9.09000015258789, 11.579999923706055, 15.65999984741211, 15.769999504089355,
    15.789999961853027, 18.360000610351562, 21.989999771118164, 23.079999923706055,
    30.009998321533203, 32.35000228881836, 32.590003967285156, 35.56000518798828,
    39.95000457763672, 53.840003967285156, 56.20000457763672, 57.95000457763672,
    59.29000473022461, 59.77000427246094, 59.920005798339844, 61.190006256103516,
    61.96000671386719, 62.50000762939453, 63.3700065612793, 63.48000717163086,
    63.48000717163086, 63.66000747680664, 63.850006103515625, 64.08000946044922,
    64.760009765625, 64.80001068115234, 64.81001281738281, 64.81001281738281,
]
_PHI3_SHORT = [
    1.05, 1.05, 1.05, 1.1,
    1.1, 1.1, 1.2500000000000002, 1.2500000000000002,
    1.4000000000000004, 1.4500000000000004, 1.5500000000000005, 1.8500000000000008,
    1.9000000000000008, 2.000000000000001, 2.000000000000001, 2.000000000000001,
    2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
    2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
    2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
    2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
    2.1000000000000005, 2.1000000000000005, 2.2, 2.3499999999999996,
    2.3499999999999996, 2.3499999999999996, 2.3499999999999996, 2.3999999999999995,
    2.3999999999999995, 2.6499999999999986, 2.6999999999999984, 2.8999999999999977,
    2.9499999999999975, 3.049999999999997, 3.049999999999997, 3.049999999999997,
]

PRESETS = {
    "llama2-7b": dict(head_dim=128, rope_theta=10000.0, context=4096, max_context=4096,
                      rope_scaling=None, note="Llama 2 7B"),
    "llama3-8b": dict(head_dim=128, rope_theta=500000.0, context=8192, max_context=8192,
                      rope_scaling=None, note="Llama 3 8B"),
    "llama3.1-8b": dict(head_dim=128, rope_theta=500000.0, context=8192, max_context=131072,
                        rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 8192},
                        note="Llama 3.1 8B"),
    "qwen2.5-7b": dict(head_dim=128, rope_theta=1000000.0, context=32768, max_context=131072,
                       rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                     "original_max_position_embeddings": 32768},
                       note="Qwen2.5 7B with the recommended YaRN x4"),
    "mistral-7b": dict(head_dim=128, rope_theta=1000000.0, context=32768, max_context=32768,
                       rope_scaling=None, note="Mistral 7B v0.2/v0.3"),
    "phi3-mini-128k": dict(head_dim=96, rope_theta=10000.0, context=4096, max_context=131072,
                           rope_scaling={"rope_type": "longrope",
                                         "short_factor": _PHI3_SHORT, "long_factor": _PHI3_LONG,
                                         "original_max_position_embeddings": 4096},
                           note="Phi-3-mini-128k (LongRoPE)"),
    "phi3.5-mini": dict(head_dim=96, rope_theta=10000.0, context=4096, max_context=131072,
                        rope_scaling={"rope_type": "longrope",
                                      "short_factor": _PHI35_SHORT, "long_factor": _PHI35_LONG,
                                      "original_max_position_embeddings": 4096},
                        note="Phi-3.5-mini 128k (LongRoPE)"),
    "deepseek-v3": dict(head_dim=64, rope_theta=10000.0, context=4096, max_context=163840,
                        style="gptj",
                        rope_scaling={"rope_type": "yarn", "factor": 40.0, "beta_fast": 32.0,
                                      "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                                      "original_max_position_embeddings": 4096},
                        note="DeepSeek-V3 (rope part of the head, 64 dims)"),
}
PRESET_ALIASES = {"phi3.5-mini-128k": "phi3.5-mini",
                  "qwen2.5-7b-yarn": "qwen2.5-7b", "llama3.1-8b-instruct": "llama3.1-8b"}


class ModelSpec:
    """The RoPE fields of one model: from a preset or a HF config.json."""

    def __init__(self, name, head_dim, rotary_dim, rope_theta, context, max_context,
                 rope_scaling=None, style="neox", hf_config=None, note=""):
        self.name = name
        self.head_dim = int(head_dim)
        self.rotary_dim = int(rotary_dim) if rotary_dim else int(head_dim)
        self.rope_theta = float(rope_theta)
        self.context = int(context)
        self.max_context = int(max_context)
        self.rope_scaling = rope_scaling
        self.style = style
        self.hf_config = hf_config
        self.note = note

    @property
    def scaling_type(self):
        if not self.rope_scaling:
            return None
        t = self.rope_scaling.get("rope_type", self.rope_scaling.get("type"))
        t = str(t).lower() if t is not None else None
        return {"su": "longrope", "default": None}.get(t, t)

    def cache(self, rope_scaling=None, seq_len=None, native=False):
        """A RopeCache of this model without a table (frequencies only)."""
        if native and self.hf_config is not None:
            return posenc.RopeCache.from_hf_config(self.hf_config, max_positions=0,
                                                   seq_len=seq_len or 0)
        if native:
            rope_scaling = self.rope_scaling
        # HF's dynamic NTK grows the base from max_position_embeddings (the
        # context the model was trained at); the other types read
        # original_max_position_embeddings, which the dicts here carry.
        rtype = (rope_scaling or {}).get("rope_type", (rope_scaling or {}).get("type"))
        mpe = self.context if rtype == "dynamic" else self.max_context
        return posenc.RopeCache(head_dim=self.head_dim, rotary_dim=self.rotary_dim,
                                style=self.style, rope_theta=self.rope_theta, max_positions=0,
                                rope_scaling=rope_scaling, seq_len=seq_len,
                                max_position_embeddings=mpe)


def _hf_rope_dict(cfg):
    rp = cfg.get("rope_parameters")
    if isinstance(rp, dict) and "rope_type" not in rp and "type" not in rp:
        # v5 per-layer-type dicts: take the full-attention one if present.
        rp = rp.get("full_attention") or next((v for v in rp.values() if isinstance(v, dict)),
                                              None)
    if not isinstance(rp, dict):
        rp = cfg.get("rope_scaling")
    return rp if isinstance(rp, dict) else None


def model_spec(model=None, hf_config=None):
    """A ModelSpec from a preset name or a HF config.json path.

    For a config, the library builds the model's own frequencies
    (RopeCache.from_hf_config); the fields read here (head size, base,
    contexts) only set up the generic methods drawn beside it."""
    if hf_config is not None:
        with open(hf_config) as f:
            cfg = json.load(f)
        rp = _hf_rope_dict(cfg) or {}
        native = posenc.RopeCache.from_hf_config(hf_config, max_positions=0)
        p = native.params
        # GPT-J/GPT-2 call it n_positions (HF maps it to max_position_embeddings)
        m = int(cfg.get("max_position_embeddings") or cfg.get("n_positions") or 0)
        m0 = (cfg.get("original_max_position_embeddings") or
              rp.get("original_max_position_embeddings") or m)
        st = str(rp.get("rope_type", rp.get("type", "default"))).lower()
        if st == "dynamic":
            m0 = m  # dynamic NTK scales from max_position_embeddings
        elif st == "linear" and not (cfg.get("original_max_position_embeddings") or
                                     rp.get("original_max_position_embeddings")):
            # A linear-scaled model declares its extended context in
            # max_position_embeddings (it was trained at M / factor, then
            # interpolated): the original context is M / factor.
            factor = float(rp.get("factor") or 1.0)
            m0 = int(round(m / factor)) if factor > 1 else m
        if not m0:
            raise ValueError("%s: no max_position_embeddings" % hf_config)
        scaling = None if st in ("default", "none") else rp
        return ModelSpec(os.path.basename(os.path.dirname(os.path.abspath(hf_config))) or hf_config,
                         p["head_dim"], p["rotary_dim"], p["base"], int(m0), max(m, int(m0)),
                         rope_scaling=scaling, style=p["style"], hf_config=hf_config,
                         note=os.path.basename(hf_config))
    name = PRESET_ALIASES.get(model, model)
    if name not in PRESETS:
        raise ValueError("unknown model %r: presets are %s" % (model, ", ".join(sorted(PRESETS))))
    d = dict(PRESETS[name])
    return ModelSpec(name, d["head_dim"], d.get("rotary_dim"), d["rope_theta"], d["context"],
                     d["max_context"], rope_scaling=d["rope_scaling"],
                     style=d.get("style", "neox"), note=d.get("note", ""))


# ---------------------------------------------------------------------------
# decay
# ---------------------------------------------------------------------------

def _same_content(pairs, tokens, dim, seed, scale=1.0):
    """pairs random vectors, each repeated at `tokens` positions:
    [pairs, 1, tokens, dim] float32 (batch = pair)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((pairs, 1, 1, dim)).astype(np.float32) * np.float32(scale)
    return np.ascontiguousarray(np.broadcast_to(x, (pairs, 1, tokens, dim)))


def decay_numbers(kind="rope", base=10000.0, head_dim=128, max_distance=512, pairs=80, seed=0,
                  offset=0):
    """(distances 0..max_distance, mean q.k) for one encoding.

    kind "rope": x rotated by the library at position offset+delta (query) and
    offset (key). kind "sinusoidal": x/sqrt(2) plus the library's table at
    those positions. The mean is over `pairs` random x (seed fixed)."""
    tokens = max_distance + 1
    positions = np.tile(offset + np.arange(tokens, dtype=np.int64), (pairs, 1))
    if kind == "rope":
        x = _same_content(pairs, tokens, head_dim, seed)
        cache = posenc.RopeCache(head_dim=head_dim, rope_theta=base, max_positions=0)
        cache.apply_(x, positions=positions)
    elif kind == "sinusoidal":
        x = _same_content(pairs, tokens, head_dim, seed, scale=1.0 / math.sqrt(2.0))
        posenc.sinusoidal_add_(x, positions=positions, base=base)
    else:
        raise ValueError("kind must be 'rope' or 'sinusoidal', got %r" % kind)
    q = x[:, 0, :, :].astype(np.float64)        # query at offset + delta
    k = x[:, 0, 0:1, :].astype(np.float64)      # key at offset
    qk = np.einsum("ptd,pod->pt", q, k)
    return np.arange(tokens), qk.mean(axis=0)


def alibi_numbers(n_heads=8, max_distance=512, max_bias=8.0):
    """(distances, bias [n_heads, max_distance+1], slopes): ALiBi's bias for a
    query at the last position and keys delta tokens back, as the library adds
    it to a zero score row."""
    k_len = max_distance + 1
    scores = np.zeros((1, n_heads, 1, k_len), dtype=np.float32)
    slopes = posenc.alibi_slopes(n_heads, max_bias)
    posenc.alibi_add_bias_(scores, slopes=slopes, q_positions=np.array([[k_len - 1]]))
    bias = scores[0, :, 0, ::-1].astype(np.float64)   # column delta = key k_len-1-delta
    return np.arange(k_len), bias, slopes


# ---------------------------------------------------------------------------
# heatmap
# ---------------------------------------------------------------------------

def heatmap_numbers(n_positions=256, d_model=128, base=10000.0, concat=False):
    """The library's sinusoidal table [n_positions, d_model]."""
    return posenc.sinusoidal_table(n_positions, d_model, base=base, concat=concat)


def stripe_widths(table):
    """Mean length of the runs of equal sign down each column (positions):
    the width of the stripes in the heatmap, one value per dimension."""
    t = np.asarray(table)
    signs = np.signbit(t)
    changes = (signs[1:] != signs[:-1]).sum(axis=0)
    return t.shape[0] / (changes + 1.0)


# ---------------------------------------------------------------------------
# scaling
# ---------------------------------------------------------------------------

METHOD_LABELS = {
    "original": "original (no scaling)",
    "linear": "linear / PI",
    "ntk": "NTK-aware (static)",
    "dynamic": "dynamic NTK",
    "yarn": "YaRN",
    "llama3": "Llama-3",
    "longrope": "LongRoPE",
    "proportional": "proportional (Gemma-4)",
}


def scaling_methods(spec, target_context):
    """[(name, rope_scaling dict or None, seq_len)] drawn for spec at
    target_context: every generic method with factor s = target/context, and
    the model's own scaling in place of the generic one of its type."""
    s = float(target_context) / float(spec.context)
    m0 = spec.context
    out = [("original", None, None),
           ("linear", {"rope_type": "linear", "factor": s}, None),
           ("ntk", {"rope_type": "ntk", "factor": s}, None),
           # HF dynamic: base grows with the running length; shown at target.
           ("dynamic", {"rope_type": "dynamic", "factor": s}, int(target_context)),
           ("yarn", {"rope_type": "yarn", "factor": s, "original_max_position_embeddings": m0},
            None),
           ("llama3", {"rope_type": "llama3", "factor": s, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": m0}, None)]
    own = spec.scaling_type
    if own is not None:
        own_seq = int(target_context) if own in ("dynamic", "longrope") else None
        entry = (own, "native", own_seq)
        names = [n for n, _, _ in out]
        if own in names:
            out[names.index(own)] = entry
        else:
            out.append(entry)
    return out


def scaling_numbers(spec, target_context):
    """Per method: inv_freq, wavelength (2*pi/inv_freq, tokens), stretch
    (original inv_freq / scaled), attention_factor, and the dict used.

    Returns {"spec", "target_context", "factor", "index", "methods": {name: {...}}}.
    Methods whose parameters the library rejects are left out and listed in
    "skipped" with the reason."""
    base_inv = spec.cache().inv_freq.astype(np.float64)
    res = {"spec": spec, "target_context": int(target_context),
           "factor": float(target_context) / spec.context,
           "index": np.arange(base_inv.size), "methods": {}, "skipped": {}}
    for name, rs, seq_len in scaling_methods(spec, target_context):
        native = rs == "native"
        try:
            c = spec.cache(rope_scaling=None if native else rs, seq_len=seq_len, native=native)
        except (posenc.PosencError, ValueError) as e:
            res["skipped"][name] = str(e)
            continue
        inv = c.inv_freq.astype(np.float64)
        with np.errstate(divide="ignore"):   # "proportional" zeroes some frequencies
            wavelength, stretch = TWO_PI / inv, base_inv / inv
        res["methods"][name] = {
            "inv_freq": inv, "wavelength": wavelength, "stretch": stretch,
            "attention_factor": c.attention_factor,
            "rope_scaling": spec.rope_scaling if native else rs, "native": native,
            "seq_len": seq_len,
        }
    return res


# ---------------------------------------------------------------------------
# extrapolation
# ---------------------------------------------------------------------------

def extrapolation_numbers(spec, target_context, train_context=None, scaling=None):
    """Full turns L*inv_freq/(2*pi) per frequency at the training and target
    contexts; `unseen` marks frequencies that never completed a turn in
    training (so angles at the target are new to the model).

    scaling: None, "native" (the model's own) or a method name of
    scaling_methods(): adds turns_scaled, the turns at the target under it."""
    train = int(train_context or spec.context)
    if train != spec.context:   # the generic methods extend from the given context
        spec = copy.copy(spec)
        spec.context = train
    inv = spec.cache().inv_freq.astype(np.float64)
    out = {"spec": spec, "train_context": train, "target_context": int(target_context),
           "index": np.arange(inv.size), "inv_freq": inv,
           "turns_train": train * inv / TWO_PI, "turns_target": int(target_context) * inv / TWO_PI}
    out["unseen"] = out["turns_train"] < 1.0
    if scaling:
        methods = dict((n, (rs, sl)) for n, rs, sl in scaling_methods(spec, target_context))
        if scaling == "native":
            if spec.scaling_type is None:
                raise ValueError("%s has no rope_scaling of its own" % spec.name)
            scaling = spec.scaling_type
        if scaling not in methods or scaling == "original":
            raise ValueError("unknown scaling %r: one of %s" % (
                scaling, ", ".join(n for n in methods if n != "original")))
        rs, seq_len = methods[scaling]
        native = rs == "native"
        c = spec.cache(rope_scaling=None if native else rs, seq_len=seq_len, native=native)
        sinv = c.inv_freq.astype(np.float64)
        out["scaling"] = scaling
        out["scaling_dict"] = spec.rope_scaling if native else rs
        out["scaling_native"] = native
        out["inv_freq_scaled"] = sinv
        out["turns_scaled"] = int(target_context) * sinv / TWO_PI
    return out


# ---------------------------------------------------------------------------
# drawing
# ---------------------------------------------------------------------------

def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _fmt_tokens(n):
    n = int(n)
    if n >= 1024 and n % 1024 == 0:
        return "%dk" % (n // 1024)
    return str(n)


def _fmt_base(b):
    return "{:,}".format(int(b)) if float(b).is_integer() else "%g" % b


def draw_decay(curves, out, alibi=None, title=None, log_x=False):
    """curves: [(label, distances, mean_qk)]; alibi: alibi_numbers() or None."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 6.2))
    if log_x:
        ax.set_xscale("symlog", linthresh=1.0)
    styles = ["-", "-", "-", "-"]
    for i, (label, dist, qk) in enumerate(curves):
        ax.plot(dist, qk, styles[i % len(styles)], lw=1.4, label=label)
    ax.axhline(0.0, color="0.6", lw=0.8)
    ax.set_xlabel("relative distance (query position - key position, tokens)")
    ax.set_ylabel("mean q\u00b7k  (same random vector at both positions)")
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if alibi is not None:
        dist, bias, slopes = alibi
        ax2 = ax.twinx()
        n = bias.shape[0]
        for h in sorted({0, n // 2, n - 1}):
            line, = ax2.plot(dist, bias[h], "--", lw=1.1, color="0.35", alpha=0.5 + 0.5 * h / max(n - 1, 1))
            handles.append(line)
            labels.append("ALiBi bias, head %d (slope %.3g)" % (h + 1, slopes[h]))
        ax2.set_ylabel("ALiBi bias added to the logit (dashed)")
    # below the axes: inside, it would cover a curve for some base or distance
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2,
              fontsize=8, frameon=False)
    ax.set_title(title or "Long-term decay of q\u00b7k with distance")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def draw_heatmap(table, out, base=10000.0, concat=False):
    plt = _plt()
    n, d = table.shape
    fig, ax = plt.subplots(figsize=(9, 6))
    im = ax.imshow(table, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1,
                   interpolation="nearest", origin="upper")
    ax.set_xlabel("embedding dimension index%s" % (
        " ([sin | cos] halves)" if concat else " (even = sin, odd = cos)"))
    ax.set_ylabel("position")
    cb = fig.colorbar(im, ax=ax)
    cb.set_label("PE[position, dimension]")
    ax.set_title("Sinusoidal position table (base %g, d_model %d): stripes widen with the "
                 "dimension\n(wavelength 2\u03c0\u00b7base^(2i/d) grows geometrically)" % (base, d),
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


_COLORS = {"original": "black", "linear": "tab:blue", "ntk": "tab:orange",
           "dynamic": "tab:green", "yarn": "tab:red", "llama3": "tab:purple",
           "longrope": "tab:brown", "proportional": "tab:olive"}
_LINES = {"original": "-", "linear": "-", "ntk": "--", "dynamic": ":", "yarn": "-",
          "llama3": "-.", "longrope": "--", "proportional": "--"}


def _method_label(name, m, factor):
    lab = METHOD_LABELS.get(name, name)
    if name == "original":
        return lab
    rs = m["rope_scaling"] or {}
    f = rs.get("factor", factor)
    extra = " \u00d7%g" % f if f else ""
    if m["native"]:
        extra += " (model config)"
    if name in ("dynamic", "longrope") and m["seq_len"]:
        extra += " at %s" % _fmt_tokens(m["seq_len"])
    if abs(m["attention_factor"] - 1.0) > 1e-9:
        extra += ", attn \u00d7%.3f" % m["attention_factor"]
    return lab + extra


def draw_scaling(res, out):
    plt = _plt()
    spec = res["spec"]
    idx = res["index"]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9.5, 8.5), sharex=True,
                                   gridspec_kw={"height_ratios": [3, 2]})
    for name, m in res["methods"].items():
        kw = dict(color=_COLORS.get(name, None), ls=_LINES.get(name, "-"),
                  lw=2.2 if name == "original" else 1.5)
        label = _method_label(name, m, res["factor"])
        ax1.plot(idx, m["wavelength"], label=label, **kw)
        ax2.plot(idx, m["stretch"], label=label, **kw)
    ax1.set_yscale("log")
    ax1.axhline(spec.context, color="0.2", lw=1, ls=(0, (6, 3)))
    ax1.text(idx[0], spec.context * 1.15, "original context %s" % _fmt_tokens(spec.context),
             fontsize=8)
    ax1.axhline(res["target_context"], color="0.5", lw=1, ls=(0, (2, 2)))
    ax1.text(idx[0], res["target_context"] * 1.15,
             "target context %s" % _fmt_tokens(res["target_context"]), fontsize=8, color="0.4")
    ax1.set_ylabel("wavelength 2\u03c0/\u03b8\u1d62 (tokens, log)")
    ax1.grid(alpha=0.3, which="both")
    ax1.legend(fontsize=8, loc="lower right", framealpha=0.9)
    ax1.set_title("%s: what each scaling method does to each RoPE frequency\n"
                  "head_dim %d, rotary %d, base %s; target %s = %.3g\u00d7 the original %s"
                  % (spec.note or spec.name, spec.head_dim, spec.rotary_dim,
                     _fmt_base(spec.rope_theta), _fmt_tokens(res["target_context"]),
                     res["factor"], _fmt_tokens(spec.context)), fontsize=10)
    ax2.set_yscale("log")
    ax2.axhline(1.0, color="0.6", lw=0.8)
    ax2.axhline(res["factor"], color="0.6", lw=0.8, ls=":")
    ax2.text(idx[-1], res["factor"] * 1.08, "s = %.3g" % res["factor"], ha="right", fontsize=8)
    ax2.set_ylabel("stretch: original / scaled \u03b8\u1d62\n(1 = untouched, s = interpolated)")
    ax2.set_xlabel("frequency index i (0 = fastest; rotary pair i)")
    ax2.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def draw_extrapolation(res, out):
    plt = _plt()
    spec = res["spec"]
    idx = res["index"]
    fig, ax = plt.subplots(figsize=(9.5, 5.6))
    ax.plot(idx, res["turns_train"], color="black", lw=1.8,
            label="turns at the training context %s" % _fmt_tokens(res["train_context"]))
    ax.plot(idx, res["turns_target"], color="tab:red", lw=1.6,
            label="turns at the target context %s (no scaling)" % _fmt_tokens(res["target_context"]))
    if "turns_scaled" in res:
        f = (res["scaling_dict"] or {}).get("factor")
        ax.plot(idx, res["turns_scaled"], color="tab:blue", lw=1.4, ls="--",
                label="turns at %s with %s%s%s" % (
                    _fmt_tokens(res["target_context"]),
                    METHOD_LABELS.get(res["scaling"], res["scaling"]),
                    " \u00d7%g" % f if f else "",
                    " (model config)" if res["scaling_native"] else ""))
    ax.set_yscale("log")
    ax.axhline(1.0, color="0.3", lw=1, ls=(0, (6, 3)))
    ax.text(idx[0], 1.12, "one full turn", fontsize=8)
    unseen = np.nonzero(res["unseen"])[0]
    if unseen.size:
        ax.axvspan(unseen[0] - 0.5, idx[-1] + 0.5, color="tab:red", alpha=0.08,
                   label="never a full turn in training (%d of %d): angles beyond %s unseen"
                   % (unseen.size, idx.size, _fmt_tokens(res["train_context"])))
    ax.set_xlabel("frequency index i (0 = fastest)")
    ax.set_ylabel("full turns L\u00b7\u03b8\u1d62 / 2\u03c0 (log)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper right")
    ax.set_title("%s (base %s, rotary %d)\nwhy plain RoPE fails beyond the training context"
                 % (spec.note or spec.name, _fmt_base(spec.rope_theta), spec.rotary_dim),
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


# ---------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------

def _floats(text):
    return [float(v) for v in text.split(",") if v.strip()]


def _parser():
    ap = argparse.ArgumentParser(
        prog="python -m posenc.tools.explore",
        description="Figures of positional encodings from libposenc's own numbers.")
    sub = ap.add_subparsers(dest="figure", required=True, metavar="FIGURE")

    def common(p):
        p.add_argument("-o", "--output", required=True, help="out.png, out.svg or out.pdf")

    p = sub.add_parser("decay", help="mean q.k against distance: sinusoidal vs RoPE (+ ALiBi)")
    p.add_argument("--bases", type=_floats, default=[10000.0, 500000.0],
                   help="RoPE bases, comma-separated (default 10000,500000)")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--max-distance", type=int, default=1024)
    p.add_argument("--pairs", type=int, default=80, help="random q,k pairs averaged (80)")
    p.add_argument("--offset", type=int, default=0, help="position of the key (0)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-sinusoidal", action="store_true")
    p.add_argument("--alibi", action="store_true", help="overlay ALiBi's bias")
    p.add_argument("--log-x", action="store_true", help="logarithmic distance axis")
    p.add_argument("--n-heads", type=int, default=8, help="heads for the ALiBi slopes (8)")
    common(p)

    p = sub.add_parser("heatmap", help="the sinusoidal table, positions x dimensions")
    p.add_argument("--positions", type=int, default=256)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--base", type=float, default=10000.0)
    lay = p.add_mutually_exclusive_group()
    lay.add_argument("--concat", dest="concat", action="store_true", default=True,
                     help="[sin | cos] halves (fairseq), the default: the stripes visibly widen "
                          "from left to right")
    lay.add_argument("--interleaved", dest="concat", action="store_false",
                     help="the paper's layout (even = sin, odd = cos): neighbouring columns "
                          "alternate and hide the widening")
    common(p)

    for name, hlp in (("scaling", "wavelength per frequency before/after each scaling method"),
                      ("extrapolation", "full turns per frequency at train vs target context")):
        p = sub.add_parser(name, help=hlp)
        g = p.add_mutually_exclusive_group()
        g.add_argument("--model", default=None,
                       help="preset: %s" % ", ".join(sorted(PRESETS)))
        g.add_argument("--hf-config", default=None, help="a HuggingFace config.json")
        p.add_argument("--target-context", type=int, default=None,
                       help="default: the model's extended context, or 4x its original")
        if name == "extrapolation":
            p.add_argument("--train-context", type=int, default=None,
                           help="default: the model's original context")
            p.add_argument("--scaling", default=None,
                           help="also show the turns under one method: linear, ntk, dynamic, "
                                "yarn, llama3 or native (the model's own)")
        common(p)
    return ap


def _default_target(spec):
    return spec.max_context if spec.max_context > spec.context else 4 * spec.context


def main(argv=None):
    args = _parser().parse_args(argv)
    out = args.output
    if os.path.splitext(out)[1].lower() not in (".png", ".svg", ".pdf"):
        print("explore: -o must end in .png, .svg or .pdf", file=sys.stderr)
        return 2
    try:
        if args.figure == "decay":
            curves = []
            if not args.no_sinusoidal:
                d, qk = decay_numbers("sinusoidal", 10000.0, args.head_dim, args.max_distance,
                                      args.pairs, args.seed, args.offset)
                curves.append(("sinusoidal (added), base 10000", d, qk))
            for b in args.bases:
                d, qk = decay_numbers("rope", b, args.head_dim, args.max_distance, args.pairs,
                                      args.seed, args.offset)
                curves.append(("RoPE, base %g" % b, d, qk))
            alibi = alibi_numbers(args.n_heads, args.max_distance) if args.alibi else None
            draw_decay(curves, out, alibi,
                       title="Mean q\u00b7k against distance, head_dim %d, %d random pairs"
                       % (args.head_dim, args.pairs), log_x=args.log_x)
        elif args.figure == "heatmap":
            table = heatmap_numbers(args.positions, args.d_model, args.base, args.concat)
            draw_heatmap(table, out, args.base, args.concat)
        else:
            if args.model is None and args.hf_config is None:
                args.model = "llama2-7b" if args.figure == "extrapolation" else "llama3-8b"
            spec = model_spec(args.model, args.hf_config)
            target = args.target_context or _default_target(spec)
            train = getattr(args, "train_context", None) or spec.context
            if target < train:
                print("explore: --target-context %d is shorter than the original context %d: "
                      "nothing to extend" % (target, train), file=sys.stderr)
                return 1
            if args.figure == "scaling":
                res = scaling_numbers(spec, target)
                for name, why in res["skipped"].items():
                    print("explore: %s left out: %s" % (name, why), file=sys.stderr)
                draw_scaling(res, out)
            else:
                res = extrapolation_numbers(spec, target, args.train_context, args.scaling)
                draw_extrapolation(res, out)
    except (ValueError, OSError, posenc.PosencError) as e:
        print("explore: %s" % e, file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
