"""Every key that sets positions, removed or altered, in every published
config of tests/data/configs: the loader must give what transformers computes
for the changed file, or refuse with a sentence naming the key.

What transformers computes is written out below from its configuration and
modeling classes (per-class layer layouts, the rotated width each class
takes, the base each layer reads, the pairing, which layers run an indexer
or a compressor) - a second statement of those rules, independent of
src/config, reduced to what decides a layer's rotation: head_dim,
rotary_dim, pairing, base, rope type and factor, per layer and role. The
C tests check the frequencies themselves (tests/test_model_*.c).

The library is reached through ctypes directly: the per-role accessors
(pe_model_rope_layer_role) are not part of the Python API yet.
"""
import copy
import ctypes
import json
import math
import re

import pytest

from posenc import _lib
from conftest import REPO

CONFIGS = REPO / "tests" / "data" / "configs"
FIXTURES = sorted(p for p in CONFIGS.rglob("*.json") if "bad" not in p.parts)

GPTJ, NEOX = 1, 0
SCALING = {"default": 0, "linear": 1, "ntk": 2, "dynamic": 3, "yarn": 4, "longrope": 5,
           "llama3": 6}
ROLES = 3

# ---- the library ---------------------------------------------------------------

lib = _lib.lib
_p = ctypes.c_void_p
lib.pe_model_rope_from_hf_config.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int64,
                                             ctypes.c_int64, ctypes.c_uint32, ctypes.POINTER(_p)]
lib.pe_model_rope_from_hf_config.restype = ctypes.c_int
lib.pe_model_rope_num_layers.argtypes = [_p]
lib.pe_model_rope_num_layers.restype = ctypes.c_int32
lib.pe_model_rope_layer_role.argtypes = [_p, ctypes.c_int32, ctypes.c_int32]
lib.pe_model_rope_layer_role.restype = _p
lib.pe_model_rope_destroy.argtypes = [_p]
lib.pe_model_rope_destroy.restype = None
lib.pe_rope_cache_params.argtypes = [_p, ctypes.POINTER(_lib.RopeParams)]
lib.pe_rope_cache_params.restype = ctypes.c_int


def load(cfg):
    """(None, [per layer: (rotation per role or None) x 3]) or (message, None)."""
    text = json.dumps(cfg).encode()
    h = _p()
    st = lib.pe_model_rope_from_hf_config(text, len(text), 0, 0, 0, ctypes.byref(h))
    if st != 0:
        return _lib.last_error(), None
    try:
        out = []
        for layer in range(lib.pe_model_rope_num_layers(h)):
            roles = []
            for role in range(ROLES):
                c = lib.pe_model_rope_layer_role(h, layer, role)
                if not c:
                    roles.append(None)
                    continue
                p = _lib.RopeParams()
                p.struct_size = ctypes.sizeof(p)
                assert lib.pe_rope_cache_params(c, ctypes.byref(p)) == 0
                factor = p.factor if p.scaling not in (0,) else 1.0
                roles.append((p.head_dim, p.rotary_dim, p.style, p.base, p.scaling, factor))
            out.append(tuple(roles))
        return None, out
    finally:
        lib.pe_model_rope_destroy(h)


# ---- transformers, restated ------------------------------------------------------

class Raises(Exception):
    """transformers would raise (or the rule cannot be evaluated) for this file."""


def text_root(cfg):
    tc = cfg.get("text_config")
    if isinstance(tc, dict) and not any(cfg.get(k) is not None for k in
                                        ("rope_parameters", "rope_scaling", "rope_theta",
                                         "hidden_size", "head_dim")):
        return tc
    return cfg


def get(d, k, default=None):
    v = d.get(k) if isinstance(d, dict) else None
    return default if v is None else v


# DeepseekV3Attention and the classes built on it (rope_interleave).
MLA = {"deepseek_v2", "deepseek_v3", "kimi_k2", "deepseek_v32", "glm_moe_dsa", "glm4_moe_lite"}
# rotate_every_two, view_as_complex, repeat_interleave'd cos/sin on x[..., ::2] / x[..., 1::2]
INTERLEAVED = {"gptj", "codegen", "cohere", "cohere2", "glm", "glm4", "llama4", "llama4_text",
               "helium", "ernie4_5", "ernie4_5_moe", "deepseek_v4"}
# rotary classes that take int(head_dim * partial_rotary_factor) for the default rope
APPLIES_FACTOR = {"phi", "phi3", "gpt_neox", "stablelm", "persimmon", "glm", "glm4", "glm4_moe",
                  "glm4_moe_lite", "qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe",
                  "qwen3_5_moe_text", "mimo_v2", "mimo_v2_flash"}
# attention classes with no rotary embedding
NO_ROPE = {"nemotron_h", "jamba"}
# rope_theta the config class falls back to (the types of the fixtures).
DEFAULT_THETA = {"llama": 10000.0, "mistral": 10000.0, "qwen2": 10000.0, "gptj": 10000.0,
                 "gpt_neox": 10000.0, "phi3": 10000.0, "deepseek_v3": 10000.0,
                 "kimi_k2": 10000.0, "deepseek_v32": 10000.0, "gpt_oss": 150000.0,
                 "minimax_m2": 5e6, "gemma3_text": 1e6, "gemma3": 1e6, "llama4_text": 5e5,
                 "llama4": 5e5, "cohere2": 10000.0, "exaone4": 10000.0, "deepseek_v4": 10000.0,
                 "codegen": 10000.0, "cohere": 10000.0, "glm": 10000.0, "glm4": 10000.0,
                 "deepseek_v2": 10000.0, "gemma": 10000.0, "gemma2": 10000.0, "phi": 10000.0,
                 "phimoe": 1e6, "stablelm": 10000.0, "falcon": 10000.0, "olmo": 10000.0,
                 "olmo3": 5e5, "granite": 10000.0, "granitemoehybrid": 10000.0}
DEFAULT_HEAD = {"gemma3_text": 256, "gemma3": 256, "llama4_text": 128, "llama4": 128,
                "gpt_oss": 64, "minimax_m2": 128, "deepseek_v4": 512}


def rotation(mt, tr, rope, base_override=None, force_default=False, style=None,
             base_forced=None, v4=False):
    """One rotation: rope is the dict (rope_parameters / rope_scaling, or a
    layer type's) or None."""
    d = None if force_default else rope
    if d is not None and not isinstance(d, dict):
        raise Raises("rope dict")
    rtype = str(get(d, "rope_type", get(d, "type", "default")))
    if rtype == "su" or (mt == "phi3" and rtype == "yarn"):
        rtype = "longrope"
    if rtype == "mrope":
        rtype = "default"
    if rtype not in SCALING:
        raise Raises("rope_type")
    # head_dim as the class reads it
    if mt in MLA:
        hd = get(tr, "qk_rope_head_dim")
        if hd is None:
            raise Raises("qk_rope_head_dim")      # required here (the class default is 64)
    else:
        hd = get(tr, "head_dim") or DEFAULT_HEAD.get(mt)
        if not hd:
            hidden, heads = get(tr, "hidden_size", get(tr, "n_embd")), \
                get(tr, "num_attention_heads", get(tr, "n_head"))
            if not hidden or not heads:
                raise Raises("head_dim")
            hd = hidden // heads
    prf = get(d, "partial_rotary_factor", get(tr, "partial_rotary_factor",
                                              get(tr, "rotary_pct")))
    if prf is None and v4:
        prf = get(tr, "qk_rope_head_dim", 64) / hd
    prf = 1.0 if prf is None else prf
    if not (0 < prf <= 1):
        raise Raises("partial_rotary_factor")
    if mt in ("gptj", "codegen"):
        rd = get(tr, "rotary_dim", hd)
    elif mt == "minimax_m2":
        rd = int(hd * (get(tr, "rotary_dim", hd // 2) / hd))
    elif rtype != "default" or mt in APPLIES_FACTOR or v4:
        rd = int(hd * prf)
    else:
        rd = hd
    if rd < 2 or rd > hd or rd % 2:
        raise Raises("rotary dim")
    if v4:
        hd = rd
    base = base_forced if base_forced is not None else get(d, "rope_theta")
    if base is None:
        base = base_override
    if base is None:
        base = get(tr, "rope_theta", get(tr, "rotary_emb_base", DEFAULT_THETA.get(mt)))
    if base is None:
        raise Raises("rope_theta")
    if style is None:
        style = GPTJ if mt in INTERLEAVED else NEOX
        if mt in MLA:
            style = NEOX if get(tr, "rope_interleave", True) is False else GPTJ
    m = get(tr, "max_position_embeddings")
    factor = 1.0
    if rtype in ("linear", "dynamic", "llama3"):
        factor = get(d, "factor")
        if factor is None:
            raise Raises("factor")
    elif rtype in ("yarn", "longrope"):
        factor = get(d, "factor")
        if factor is None:
            m0 = get(tr, "original_max_position_embeddings",
                     get(d, "original_max_position_embeddings", m))
            if not m or not m0:
                raise Raises("factor")
            factor = m / m0
    return (hd, rd, style, float(base), SCALING[rtype], float(factor))


def layer_types(mt, tr, n):
    lt = tr.get("layer_types")
    if lt is not None:
        if not isinstance(lt, list) or len(lt) != n:
            raise Raises("layer_types")
        return lt
    full, swa, lin = "full_attention", "sliding_attention", "linear_attention"
    if mt in ("gemma3_text", "gemma3", "gemma3n_text", "gemma3n", "cohere2"):
        p = get(tr, "sliding_window_pattern", get(tr, "_sliding_window_pattern",
                                                  6 if mt != "cohere2" else 4))
        return [swa if (i + 1) % p else full for i in range(n)]
    if mt == "exaone4":
        p = get(tr, "sliding_window_pattern", 4)
        if isinstance(p, str):
            return [swa if p[i % len(p)] == "L" and i != n - 1 else full for i in range(n)]
        return [swa if (i + 1) % p else full for i in range(n)]
    if mt == "modernbert":
        p = get(tr, "global_attn_every_n_layers", 3)
        return [full if i % p == 0 else swa for i in range(n)]
    if mt in ("mimo_v2", "mimo_v2_flash") and "hybrid_layer_pattern" in tr:
        hp = tr["hybrid_layer_pattern"]
        if len(hp) != n:
            raise Raises("hybrid_layer_pattern")
        return [swa if x == 1 else full for x in hp]
    if mt == "minimax" and "attn_type_list" in tr:
        al = tr["attn_type_list"]
        if len(al) != n:
            raise Raises("attn_type_list")
        return [full if x == 1 else lin for x in al]
    if mt in ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"):
        p = get(tr, "full_attention_interval", 4)
        return [full if (i + 1) % p == 0 else lin for i in range(n)]
    return [full] * n


def expect(cfg):
    tr = text_root(cfg)
    mt = get(tr, "model_type", cfg.get("model_type"))
    n = get(tr, "num_hidden_layers", get(tr, "n_layer", get(tr, "num_layers")))
    n = n or get(tr, "num_hidden_layers", {"gemma3_text": 26, "gemma3": 26, "llama4_text": 48,
                                      "llama4": 48, "gpt_oss": 36, "minimax_m2": 62,
                                      "modernbert": 22, "exaone4": 32, "cohere2": 40,
                                      "deepseek_v4": 43}.get(mt))
    if not n:
        raise Raises("num_hidden_layers")
    rp = tr.get("rope_parameters")
    key = "rope_parameters" if rp is not None else "rope_scaling"
    rope = rp if rp is not None else tr.get("rope_scaling")
    none = (None, None, None)
    if mt == "deepseek_v4":
        return expect_v4(tr, n)
    if mt in NO_ROPE or (mt == "granitemoehybrid" and tr.get("position_embedding_type") != "rope") \
            or (mt == "falcon" and tr.get("alibi") is True):
        return [none] * n
    if tr.get("mla_use_nope") is True:
        # Kimi-Linear's key: the table's MLA classes rotate whatever it says, and
        # the library refuses it by name rather than guess which model this is
        raise Raises("mla_use_nope")
    types = layer_types(mt, tr, n)
    # standardize_rope_params: keyed by layer type only when every entry is one
    per_type = isinstance(rope, dict) and rope and all(isinstance(v, dict) for v in rope.values()) \
        and "rope_theta" not in rope and "rope_type" not in rope and "type" not in rope
    # Llama 4 / SmolLM3: no_rope_layers, else every no_rope_layer_interval-th layer NoPE
    nrl = tr.get("no_rope_layers") if mt in ("llama4", "llama4_text", "smollm3") else None
    out = []
    idx_full = None
    if mt == "glm_moe_dsa":
        it = tr.get("indexer_types")
        if it is None:
            freq = max(get(tr, "index_topk_freq", 1), 1)
            off = get(tr, "index_skip_topk_offset", 2)
            it = ["full" if max(i - off + 1, 0) % freq == 0 else "shared" for i in range(n)]
        idx_full = [x == "full" for x in it]
    for i, t in enumerate(types):
        if t in ("linear_attention", "mamba", "conv", "linear"):
            out.append(none)
            continue
        full = t == "full_attention"
        if mt == "cohere2" and full:
            out.append(none)
            continue
        if mt == "exaone4" and full and tr.get("sliding_window", 4096) is not None:
            out.append(none)
            continue
        if mt in ("llama4", "llama4_text", "smollm3"):
            if nrl:
                if nrl[i] == 0:
                    out.append(none)
                    continue
            elif (i + 1) % get(tr, "no_rope_layer_interval", 4) == 0:
                out.append(none)
                continue
        if per_type:
            if t not in rope:
                raise Raises(key)
            r = rotation(mt, tr, rope[t])
        elif mt in ("gemma3_text", "gemma3", "gemma3n_text", "gemma3n") and not full:
            r = rotation(mt, tr, None, base_override=get(tr, "rope_local_base_freq", 10000.0),
                         force_default=True)
        elif mt in ("mimo_v2", "mimo_v2_flash") and not full and tr.get("swa_rope_theta") is not None:
            r = rotation(mt, tr, None, base_override=tr["swa_rope_theta"], force_default=True)
        elif mt == "modernbert":
            r = rotation(mt, tr, rope, base_override=get(
                tr, "global_rope_theta" if full else "local_rope_theta", 160000.0 if full else 10000.0))
        else:
            r = rotation(mt, tr, rope)
        idx = None
        if mt == "deepseek_v32" or (mt == "glm_moe_dsa" and idx_full[i]):
            il = tr.get("indexer_rope_interleave", mt == "glm_moe_dsa")
            idx = r[:2] + (GPTJ if il else NEOX,) + r[3:]
        out.append((r, idx, None))
    return out


def expect_v4(tr, n):
    lt = tr.get("layer_types")
    if lt is None:
        cr = tr.get("compress_ratios")
        if cr is not None:
            if len(cr) < n or any(x not in (0, 4, 128) for x in cr[:n]):
                raise Raises("compress_ratios")
            lt = [{0: "sliding_attention", 4: "compressed_sparse_attention",
                   128: "heavily_compressed_attention"}[x] for x in cr[:n]]
        else:
            lt = ["heavily_compressed_attention"] * min(n, 2) + [
                "compressed_sparse_attention" if i % 2 else "heavily_compressed_attention"
                for i in range(n - 2)]
    rp = tr.get("rope_parameters")
    ctheta = get(tr, "compress_rope_theta", 160000.0)
    if isinstance(rp, dict) and ("main" in rp or "compress" in rp):
        main = rotation("deepseek_v4", tr, rp["main"], v4=True)
        comp = rotation("deepseek_v4", tr, rp["compress"], base_override=ctheta, v4=True)
    elif tr.get("compress_rope_parameters") is not None:
        main = rotation("deepseek_v4", tr, rp, v4=True)
        comp = rotation("deepseek_v4", tr, tr["compress_rope_parameters"], base_override=ctheta,
                        v4=True)
    else:
        yarn = rp if rp is not None else tr.get("rope_scaling")
        main = rotation("deepseek_v4", tr, None, force_default=True, v4=True)
        # __post_init__: compress = {**yarn, "rope_theta": compress_rope_theta, ...}
        comp = rotation("deepseek_v4", tr, yarn, base_forced=ctheta, v4=True)
    out = []
    for t in lt:
        if t == "sliding_attention":
            out.append((main, None, None))
        elif t == "compressed_sparse_attention":
            out.append((comp, comp, comp))
        elif t == "heavily_compressed_attention":
            out.append((comp, None, comp))
        else:
            raise Raises("layer_types")
    return out


# ---- the sweep -------------------------------------------------------------------

# The top-level keys that set positions in some census row: the PE_POSITION_KEY
# lines of the census the loaders are built from (the list, not the rules).
POSITION_KEYS = re.findall(r'^PE_POSITION_KEY\("([^"]+)"\)',
                           (REPO / "src" / "config" / "models.def").read_text(), re.M)


def altered(v):
    """A different value of the same kind."""
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return v * 2
    if isinstance(v, float):
        return v * 0.5 if 0 < v <= 1 else v * 2
    if isinstance(v, str):
        return "x" + v
    if isinstance(v, list):
        return list(reversed(v)) if len(set(map(str, v))) > 1 else v[:-1]
    if isinstance(v, dict):
        d = copy.deepcopy(v)
        if "factor" in d:
            d["factor"] = d["factor"] * 2
        elif "rope_theta" in d:
            d["rope_theta"] = d["rope_theta"] * 2
        else:
            d["factor"] = 2.0
        return d
    return None


def variants(cfg):
    tr_path = ["text_config"] if text_root(cfg) is not cfg else []
    tr = text_root(cfg)
    for k in POSITION_KEYS:
        if k not in tr or tr[k] is None:
            continue
        for what in ("removed", "altered"):
            c = copy.deepcopy(cfg)
            t = c
            for p in tr_path:
                t = t[p]
            if what == "removed":
                del t[k]
            else:
                t[k] = altered(t[k])
            yield k, what, c


def check(cfg, label, key):
    msg, got = load(cfg)
    try:
        want = expect(cfg)
    except Raises as e:
        assert msg is not None, "%s: transformers raises (%s) but the library loaded it" % (label, e)
        return "refused"
    except (KeyError, TypeError, ValueError, ZeroDivisionError, IndexError) as e:
        assert msg is not None, "%s: transformers fails (%r) but the library loaded it" % (label, e)
        return "refused"
    if msg is not None:
        assert key is not None and key in msg, \
            "%s: refused without naming %s: %s" % (label, key, msg)
        return "refused"
    assert len(got) == len(want), "%s: %d layers, transformers %d" % (label, len(got), len(want))
    for i, (g, w) in enumerate(zip(got, want)):
        for role in range(ROLES):
            gr, wr = g[role], w[role]
            if wr is None or gr is None:
                assert gr is None and wr is None, "%s layer %d role %d: %s, transformers %s" % (
                    label, i, role, gr, wr)
                continue
            assert gr[:3] == wr[:3] and gr[4] == wr[4], \
                "%s layer %d role %d: (head_dim, rotary_dim, style, base, scaling, factor) %s, " \
                "transformers %s" % (label, i, role, gr, wr)
            assert math.isclose(gr[3], wr[3], rel_tol=1e-15) and \
                math.isclose(gr[5], wr[5], rel_tol=1e-12), \
                "%s layer %d role %d: base / factor %s, transformers %s" % (label, i, role, gr, wr)
    return "same"


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: str(p.relative_to(CONFIGS)))
def test_published_config(path):
    cfg = json.loads(path.read_text())
    assert check(cfg, path.name, None) == "same"


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: str(p.relative_to(CONFIGS)))
def test_each_position_key_removed_or_altered(path):
    cfg = json.loads(path.read_text())
    outcomes = {}
    for key, what, c in variants(cfg):
        outcomes[(key, what)] = check(c, "%s with %s %s" % (path.name, key, what), key)
    # Something was perturbed wherever the file has a position key at all.
    tr = text_root(cfg)
    assert outcomes or not any(tr.get(k) is not None for k in POSITION_KEYS), path.name
