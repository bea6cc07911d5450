"""Tests of posenc.pick: the choices for the examples in docs/explore.md, the
decision table in the docs equals the module's, and every rope_scaling it
proposes is one the library builds.
"""
import json
import math
import os
import re
import subprocess
import sys

import pytest

import posenc
from posenc.tools import pick

from conftest import REPO, PACKAGE

PYDIR = str(PACKAGE.parent)   # what PYTHONPATH needs for the posenc under test
DOC = os.path.join(REPO, "docs", "explore.md")


def _table(text, marker):
    m = re.search(r"<!-- %s -->\s*\n(.*?)<!-- /%s -->" % (marker, marker), text, re.S)
    assert m, "no %s table" % marker
    rows = []
    for line in m.group(1).strip().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if set("".join(cells)) <= set("-: "):
            continue
        rows.append(cells)
    return rows[0], rows[1:]


def _doc_text():
    with open(DOC, encoding="utf-8") as f:
        return f.read()


def _examples():
    header, rows = _table(_doc_text(), "pick-examples")
    assert header == ["train", "target", "budget", "architecture", "rule", "encoding",
                      "rope_scaling"]
    return rows


EXAMPLES = _examples()


@pytest.mark.parametrize("row", EXAMPLES, ids=["%s-%s-%s-%s" % tuple(r[:4]) for r in EXAMPLES])
def test_examples_in_docs(row):
    train, target, budget, arch, rule, encoding, rs = row
    rec = pick.recommend(int(train), int(target), budget, arch)
    assert rec["rule"] == rule
    assert rec["encoding"] == encoding
    assert rec["rope_scaling"] == json.loads(rs)


def test_every_rule_has_an_example():
    assert {r[4] for r in EXAMPLES} == set(pick.RULES)


def test_decision_table_in_docs_equals_module_docstring():
    _, doc_rows = _table(_doc_text(), "pick-rules")
    lines = [l for l in pick.__doc__.splitlines() if l.startswith("| ")]
    mod_rows = [[c.strip() for c in l.strip().strip("|").split("|")] for l in lines]
    mod_rows = [r for r in mod_rows if r[0] not in ("rule",)]
    mod_rows = [r for r in mod_rows if r[0] in pick.RULES]
    assert doc_rows == mod_rows
    assert [r[0] for r in doc_rows] == list(pick.RULES)


GRID = [(n, m, b, a) for n in (512, 2048, 4096, 8192, 32768)
        for m in (256, 512, 4096, 8192, 16384, 65536, 131072, 1048576)
        for b in ("none", "finetune", "pretrain") for a in ("decoder", "encoder")]


def _rule_of_table(n, m, b, a):
    """The decision table written out independently of pick.recommend."""
    r = m / n
    if b in ("none", "finetune") and r <= 1:
        return "K1"
    if b == "pretrain":
        if a == "encoder":
            if r > 1:
                return "E2"
            return "E1" if m <= 512 else "E3"
        return "P2" if r > 1 else "P1"
    if b == "none":
        if a == "encoder":
            return "E4"
        return "N1" if r <= 4 else "N2"
    return "F1" if r <= 2 else ("F2" if r <= 8 else "F3")


@pytest.mark.parametrize("n,m,b,a", GRID)
def test_rules_follow_the_table(n, m, b, a):
    rec = pick.recommend(n, m, b, a)
    assert rec["rule"] == _rule_of_table(n, m, b, a)
    assert rec["reasons"] and all(isinstance(t, str) and t for t in rec["reasons"])
    rs = rec["rope_scaling"]
    if rs is not None:
        assert rs["factor"] == pytest.approx(m / n, rel=1e-6)
        if rs["rope_type"] in ("yarn", "llama3"):
            assert rs["original_max_position_embeddings"] == n
            assert rec["config"]["max_position_embeddings"] == m
        if rs["rope_type"] == "dynamic":   # HF scales dynamic from max_position_embeddings
            assert rec["config"]["max_position_embeddings"] == n
    json.dumps(rec)   # serialisable


SCALED = [g for g in GRID if pick.recommend(*g)["rope_scaling"]]


def picked_inv_freq(n, m, b, a):
    """The picker's recommendation and the frequencies of its rope_scaling."""
    rec = pick.recommend(n, m, b, a)
    cache = posenc.RopeCache(head_dim=128, rope_theta=10000.0, max_positions=0,
                             rope_scaling=rec["rope_scaling"], seq_len=m,
                             max_position_embeddings=rec["config"]["max_position_embeddings"])
    return rec, cache.inv_freq


@pytest.mark.parametrize("n,m,b,a", SCALED)
def test_library_accepts_every_rope_scaling(n, m, b, a):
    rec, inv = picked_inv_freq(n, m, b, a)
    assert inv[0] == pytest.approx(1.0 / (m / n) if rec["rope_scaling"]["rope_type"] == "linear"
                                   else 1.0, rel=1e-6)
    # at the target, the slowest frequency turns no more than it did at N
    # unscaled (each method interpolates it by at least r)
    base_inv = posenc.RopeCache(head_dim=128, max_positions=0).inv_freq
    assert m * inv[-1] <= n * base_inv[-1] * (1 + 1e-5)


HAVE_HF = posenc._has_symbol("pe_rope_cache_create_from_hf_config")


@pytest.mark.skipif(not HAVE_HF, reason="the library does not export "
                    "pe_rope_cache_create_from_hf_config yet")
@pytest.mark.parametrize("n,m,b,a", SCALED)
def test_config_patch_through_hf_config(n, m, b, a):
    # the config.json fields the picker proposes give, through the library's
    # own HF parser, the frequencies of the rope_scaling dict
    rec, inv = picked_inv_freq(n, m, b, a)
    cfg = rec["config"]
    hf = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
          "rope_theta": 10000.0, "max_position_embeddings": cfg["max_position_embeddings"],
          "rope_scaling": rec["rope_scaling"]}
    c2 = posenc.RopeCache.from_hf_config(hf, max_positions=0, seq_len=m)
    assert list(c2.inv_freq) == list(inv)


def test_rope_base_for():
    assert [pick.rope_base_for(n) for n in (1024, 2048, 4096, 8192, 32768, 131072)] == \
        [10000.0, 20000.0, 50000.0, 100000.0, 1000000.0, 10000000.0]
    for n in (3000, 50000, 200000, 1 << 20):
        b = pick.rope_base_for(n)
        assert b >= 0.0424 * n ** 1.628 and b >= 10000
        mant = b / 10 ** math.floor(math.log10(b))
        assert round(mant, 9) in (1.0, 2.0, 5.0)


def test_confidence():
    assert pick.recommend(4096, 16384)["confidence"] == "high"
    assert pick.recommend(4096, 65536)["confidence"] == "low"          # N2 beyond 8x
    assert pick.recommend(4096, 262144, "finetune")["confidence"] == "low"   # F3 beyond 32x


def test_invalid_inputs():
    with pytest.raises(ValueError):
        pick.recommend(0, 100)
    with pytest.raises(ValueError):
        pick.recommend(100, 100, budget="lots")
    with pytest.raises(ValueError):
        pick.recommend(100, 100, architecture="seq2seq")


def _cli(args, tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = PYDIR + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "posenc.tools.pick"] + args, cwd=str(tmp_path),
                          env=env, capture_output=True, text=True, timeout=60)


def test_cli_prints_and_writes_json(tmp_path):
    r = _cli(["--train-context", "32768", "--target-context", "131072", "--json", "rec.json"],
             tmp_path)
    assert r.returncode == 0, r.stderr
    assert "YaRN" in r.stdout and "Why:" in r.stdout and "rope_scaling" in r.stdout
    rec = json.loads((tmp_path / "rec.json").read_text())
    assert rec["rule"] == "N1"
    assert rec["rope_scaling"] == {"rope_type": "yarn", "factor": 4.0,
                                   "original_max_position_embeddings": 32768}


def test_cli_json_to_stdout(tmp_path):
    r = _cli(["--train-context", "512", "--target-context", "512", "--budget", "pretrain",
              "--architecture", "encoder", "--json", "-"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["encoding"] == "learned"


def test_cli_rejects_bad_input(tmp_path):
    r = _cli(["--train-context", "0", "--target-context", "10"], tmp_path)
    assert r.returncode == 2
    r = _cli(["--train-context", "10", "--target-context", "10", "--budget", "x"], tmp_path)
    assert r.returncode == 2


@pytest.mark.parametrize("theta", [10000.0, 500000.0])
@pytest.mark.parametrize("n,m,b,a", [g for g in GRID if pick.recommend(*g)["rope_scaling"]])
def test_library_check_unseen_angles(theta, n, m, b, a):
    # PI, YaRN and Llama-3 keep, at the target, each slow frequency (one that
    # never completed a turn in training) within its trained angles. NTK-style
    # dynamic scaling divides the middle frequencies by less than r, so some
    # still meet new angles (YaRN's criticism of NTK-aware), but fewer than
    # with no scaling at all.
    rec = pick.recommend(n, m, b, a)
    c = pick.library_check(rec, head_dim=128, rope_theta=theta)
    assert c["frequencies"] == 64
    if rec["rope_scaling"]["rope_type"] == "dynamic":
        plain = dict(rec, encoding="rope", rope_scaling=None)
        unscaled = pick.library_check(plain, head_dim=128, rope_theta=theta)
        assert c["unseen_angle_frequencies"] < unscaled["unseen_angle_frequencies"]
    else:
        assert c["unseen_angle_frequencies"] == 0
    if rec["rope_scaling"]["rope_type"] == "yarn":
        assert c["attention_factor"] == pytest.approx(0.1 * math.log(m / n) + 1, rel=1e-9)


def test_library_check_counts_unseen_angles_without_scaling():
    # Llama 2 (base 10000, head_dim 128) run at 4x with no scaling: the 18
    # frequencies that never turned in 4k tokens all meet new angles
    rec = pick.recommend(4096, 4096, "none")
    rec["target_context"] = 16384
    assert pick.library_check(rec)["unseen_angle_frequencies"] == 18


def test_library_check_alibi_slopes():
    rec = pick.recommend(1024, 4096, "pretrain")
    c = pick.library_check(rec, n_heads=12)
    assert c["alibi_slopes"] == [float(v) for v in posenc.alibi_slopes(12)]
    assert c["alibi_slopes"][:8] == [2.0 ** -k for k in range(1, 9)]


def test_cli_prints_library_check(tmp_path):
    r = _cli(["--train-context", "8192", "--target-context", "65536", "--budget", "finetune",
              "--rope-theta", "500000", "--json", "rec.json"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Library check (head_dim 128, base 500000)" in r.stdout
    assert "0 of 64 frequencies" in r.stdout
    rec = json.loads((tmp_path / "rec.json").read_text())
    assert rec["check"]["unseen_angle_frequencies"] == 0
    r = _cli(["--train-context", "8192", "--target-context", "65536", "--no-check"], tmp_path)
    assert r.returncode == 0 and "Library check" not in r.stdout


def test_the_table_is_what_selects(monkeypatch):
    # The rows come from the docstring (pick.TABLE); change one and the choice follows.
    assert pick.recommend(4096, 12288)["rule"] == "N1"            # 3x: 1 < r <= 4
    moved = {("N1", "r", "<="): 2.0, ("N2", "r", ">"): 2.0}     # the N1/N2 split at 2x
    rows = [(rule, archs, budgets, [(v, op, moved.get((rule, v, op), x)) for v, op, x in conds])
            for rule, archs, budgets, conds in pick.TABLE]
    monkeypatch.setattr(pick, "TABLE", rows)
    assert pick.recommend(4096, 12288)["rule"] == "N2"
    assert ("N1", ("decoder",), ("none",), [("r", ">", 1.0), ("r", "<=", 4.0)]) in \
        pick._parse_table(pick.__doc__)


def test_alias_is_the_tool_module():
    from posenc import pick as alias
    assert alias is pick
