#!/usr/bin/env python3
"""Write docs/pages/models.md from src/config/models.def (the census table the
loaders read) and the prose of docs/pages/models.md.in.

    scripts/gen-models-page.py            rewrite docs/pages/models.md
    scripts/gen-models-page.py --check    exit 1 (and say so) when the page
                                          is not what the table gives

The template's {{models}} and {{defaults}} are replaced by the tables and
{{position_keys}} by the keys that set positions.
"""
import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEF = ROOT / "src" / "config" / "models.def"
TEMPLATE = ROOT / "docs" / "pages" / "models.md.in"
PAGE = ROOT / "docs" / "pages" / "models.md"

FIELDS = ["type", "arch", "pair", "width", "theta", "head_dim", "heads", "kv_heads", "hidden", "layers",
          "max_pos", "layers_rule", "roles", "slice", "qk", "qk_scope", "qk_eps_key", "qk_eps_default",
          "qk_when", "qk_when_default", "latent_eps", "source"]

PAIR = {"PAIR_GPTJ": "interleaved (GPTJ)", "PAIR_NEOX": "half-split (NEOX)",
        "PAIR_MLA": "interleaved; half-split if `rope_interleave` is false",
        "PAIR_NONE": "none: no positional encoding"}
WIDTH = {"WIDTH_HEAD": "head_dim", "WIDTH_PRF": "int(head_dim x `partial_rotary_factor`)",
         "WIDTH_ROTARY_DIM": "`rotary_dim` (null: head_dim)",
         "WIDTH_MINIMAX_M2": "`rotary_dim` (default head_dim / 2), over any partial factor",
         "WIDTH_MLA": "`qk_rope_head_dim`",
         "WIDTH_MLA_PRF": "int(`qk_rope_head_dim` x `partial_rotary_factor`)",
         "WIDTH_V4": "int(head_dim x `partial_rotary_factor`), default `qk_rope_head_dim` (64 of 512)"}
LAYERS = {"LAYERS_ALL": "all", "LAYERS_GEMMA3": "local: `rope_local_base_freq`; global: `rope_theta` + scaling",
          "LAYERS_PER_TYPE": "`rope_parameters` per layer type",
          "LAYERS_COHERE2": "sliding layers only", "LAYERS_LLAMA4": "`no_rope_layers`",
          "LAYERS_EXAONE4": "sliding layers (all if `sliding_window` is null)",
          "LAYERS_MODERNBERT": "global / local thetas",
          "LAYERS_QWEN_HYBRID": "full-attention layers (linear attention: none)",
          "LAYERS_MIMO": "`hybrid_layer_pattern`: sliding at `swa_rope_theta`",
          "LAYERS_MINIMAX01": "`attn_type_list` 1 (0: linear attention, none)",
          "LAYERS_V4": "sliding: default at `rope_theta`; compressed: YaRN at `compress_rope_theta`",
          "LAYERS_GRANITE_HYBRID": "attention layers if `position_embedding_type` is `rope`",
          "LAYERS_FALCON": "all, none if `alibi` is true"}
ROLES = {"ROLES_ATTN": "attention",
         "ROLES_DSA_V32": "attention + indexer (half-split unless `indexer_rope_interleave`)",
         "ROLES_DSA_GLM5": "attention + indexer on `indexer_types` \"full\" layers (`indexer_rope_interleave`, default interleaved)",
         "ROLES_V4": "attention + compressor (compressed layers) + indexer (CSA layers)"}
SLICE = {"SLICE_HEAD_FIRST": "first rotary_dim of each head",
         "SLICE_MLA": "q head: nope then rope; k row: latent then k_pe; indexer head: rope first",
         "SLICE_V4": "last 64 of 512 (output de-rotated)"}
QK = {"QK_NONE": "-", "QK_RMS": "RMS x w", "QK_RMS_UNIT": "RMS x (1 + w)", "QK_L2": "RMS, no weight",
      "QK_V4": "q: RMS no weight; k: RMS x w", "QK_LAYERNORM": "LayerNorm (not a pe_qk_norm kind)",
      "QK_AFTER_ROPE": "RMS after the rotation (not pe_qk_norm_rope's order)",
      "QK_UNREAD": "not read in this census (reported as unknown)"}
SCOPE = {"QKS_HEAD": "per head", "QKS_TOKEN": "per token"}


def split_args(s):
    """Top-level comma split of a macro's arguments (strings may hold commas)."""
    out, cur, depth, q = [], "", 0, False
    i = 0
    while i < len(s):
        c = s[i]
        if q:
            cur += c
            if c == "\\":
                cur += s[i + 1]
                i += 1
            elif c == '"':
                q = False
        elif c == '"':
            q = True
            cur += c
        elif c == "(":
            depth += 1
            cur += c
        elif c == ")":
            depth -= 1
            cur += c
        elif c == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += c
        i += 1
    out.append(cur.strip())
    return out


def rows():
    text = DEF.read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    found = []
    for m in re.finditer(r"^PE_MODEL\((.*)\)\s*$", text, flags=re.M):
        args = split_args(m.group(1))
        if len(args) != len(FIELDS):
            sys.exit(f"models.def: {len(args)} fields instead of {len(FIELDS)}: {m.group(0)[:80]}")
        r = dict(zip(FIELDS, args))
        for k, v in r.items():
            if v.startswith('"'):
                r[k] = v[1:-1].replace('\\"', '"')
            elif v == "NULL":
                r[k] = None
        found.append(r)
    if not found:
        sys.exit("models.def: no PE_MODEL rows")
    return found


def lookup(table, key, what, row):
    if key not in table:
        sys.exit(f"models.def: {row['type']}: unknown {what} {key}")
    return table[key]


def num(v):
    f = float(v)
    if f == 0:
        return "-"
    return f"{f:g}" if f < 1e5 or f != int(f) else f"{int(f)}"


def models_table(rs):
    out = ["| model_type | Pairing | Rotated width | Layers with RoPE | Rotations per layer | Rotated channels | QK-norm | Read in |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rs:
        qk = lookup(QK, r["qk"], "qk", r)
        if r["qk"] != "QK_NONE":
            qk += f", {lookup(SCOPE, r['qk_scope'], 'scope', r)}"
            if r["qk_eps_key"]:
                qk += f", eps `{r['qk_eps_key']}`"
                d = float(r["qk_eps_default"])
                qk += f" (default {d:g})" if d else " (no default: required)"
            if r["qk_when"]:
                qk += f", when `{r['qk_when']}` (default {'true' if r['qk_when_default'] == '1' else 'false'})"
        if float(r["latent_eps"]) != 0:
            qk += f"; MLA latent norm eps {float(r['latent_eps']):g}"
        pair = lookup(PAIR, r["pair"], "pairing", r)
        out.append("| `{}` | {} | {} | {} | {} | {} | {} | {} |".format(
            r["type"], pair,
            "-" if r["pair"] == "PAIR_NONE" else lookup(WIDTH, r["width"], "width", r),
            "none" if r["pair"] == "PAIR_NONE" else lookup(LAYERS, r["layers_rule"], "layers rule", r),
            "-" if r["pair"] == "PAIR_NONE" else lookup(ROLES, r["roles"], "roles", r),
            "-" if r["pair"] == "PAIR_NONE" else lookup(SLICE, r["slice"], "slice", r),
            qk, r["source"]))
    return "\n".join(out)


def defaults_table(rs):
    out = ["| model_type | rope_theta | head_dim | heads | kv heads | hidden | layers | max positions |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rs:
        vals = [r[k] for k in ("theta", "head_dim", "heads", "kv_heads", "hidden", "layers", "max_pos")]
        if all(float(v) == 0 for v in vals):
            continue
        out.append("| `{}` | {} |".format(r["type"], " | ".join(num(v) for v in vals)))
    return "\n".join(out)


def position_keys():
    keys = re.findall(r'^PE_POSITION_KEY\("([^"]+)"\)', DEF.read_text(), flags=re.M)
    if not keys:
        sys.exit("models.def: no PE_POSITION_KEY lines")
    return ", ".join("`%s`" % k for k in keys)


def render():
    rs = rows()
    page = TEMPLATE.read_text()
    page = page.replace("{{models}}", models_table(rs)).replace("{{defaults}}", defaults_table(rs))
    page = page.replace("{{position_keys}}", position_keys())
    banner = "<!-- Generated by scripts/gen-models-page.py from src/config/models.def and docs/pages/models.md.in: edit those. -->\n"
    return banner + page


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="fail if the page is not current")
    a = ap.parse_args()
    text = render()
    if a.check:
        if not PAGE.exists() or PAGE.read_text() != text:
            print(f"{PAGE.relative_to(ROOT)} is not what {DEF.relative_to(ROOT)} gives: run "
                  "scripts/gen-models-page.py", file=sys.stderr)
            return 1
        print(f"{PAGE.relative_to(ROOT)} is current ({len(rows())} model types)")
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)} ({len(rows())} model types)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
