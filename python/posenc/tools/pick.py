"""Pick a positional encoding and its long-context settings.

    python -m posenc.tools.pick --train-context 4096 --target-context 16384
    python -m posenc.tools.pick --train-context 8192 --target-context 65536 --budget finetune --json out.json
    python -m posenc.tools.pick --train-context 512 --target-context 512 --budget pretrain --architecture encoder

prints a recommendation, its parameters, the reasons and the alternatives,
and with --json writes them together with the matching HF `rope_scaling`
dict (and the config.json fields to change). Every rope_scaling it proposes
is one the library accepts (the tests build a RopeCache from each).

Inputs: N = --train-context (the context the model was / will be trained
at), M = --target-context (the context it must serve), r = M / N;
--budget: none (use an existing RoPE model as is, no training), finetune (a
short long-context finetune, hundreds to a few thousand steps) or pretrain
(train from scratch, choosing the encoding); --architecture decoder (causal
LM) or encoder (bidirectional). none/finetune assume the existing model uses
RoPE: learned or ALiBi models have nothing to rescale.

Decision table (first matching row wins):

| rule | architecture | budget        | condition          | recommendation |
|------|--------------|---------------|--------------------|----------------|
| K1   | any          | none/finetune | r <= 1             | RoPE as is, no rope_scaling |
| E1   | encoder      | pretrain      | r <= 1, M <= 512   | learned absolute, max_len N |
| E2   | encoder      | pretrain      | r > 1              | ALiBi, symmetric -m*abs(i-j) |
| E3   | encoder      | pretrain      | r <= 1, M > 512    | RoPE, base B(N) |
| E4   | encoder      | none          | r > 1              | RoPE + dynamic NTK, factor r |
| P1   | decoder      | pretrain      | r <= 1             | RoPE, base B(N) |
| P2   | decoder      | pretrain      | r > 1              | ALiBi |
| N1   | decoder      | none          | 1 < r <= 4         | RoPE + YaRN, factor r, original N |
| N2   | decoder      | none          | r > 4              | RoPE + dynamic NTK, factor r (low confidence above 8) |
| F1   | any          | finetune      | 1 < r <= 2         | RoPE + linear (PI), factor r |
| F2   | any          | finetune      | 2 < r <= 8         | RoPE + Llama-3, factor r, low 1, high 4, original N |
| F3   | any          | finetune      | r > 8              | RoPE + YaRN, factor r, original N (low confidence above 32) |

B(N): the smallest of 1, 2, 5 x 10^k that is >= max(10000, 0.0424 * N^1.628),
the lower bound on the RoPE base for a context N fitted by Men et al. 2024
("Base of RoPE Bounds Context Length", Fig. 1): 4096 -> 50000, 8192 ->
100000, 32768 -> 1000000, 131072 -> 10000000 (Llama 3 uses 500000 at 8k,
Qwen2.5 and Mistral 1000000 at 32k).

Why these rows (the literature they follow):
- Learned absolute embeddings cannot extrapolate at all (a position >= the
  table is an error), so they only suit fixed, short encoder inputs (BERT:
  512).
- ALiBi (Press et al. 2022) is trained at N and extrapolates to longer inputs
  without any change, the reason to choose it when training from scratch
  for a longer serving context; MosaicBERT and Jina-BERT v2 use its symmetric
  form in encoders (trained at 128/512, run at 8192). Its bias favours recent
  tokens: long-range retrieval is weaker than a RoPE model trained long.
- PI / linear (Chen et al. 2023) divides every frequency by s: it needs a
  finetune (about 1000 steps) to recover, and squeezes the fast, local
  frequencies by s too, so it is kept for small ratios.
- NTK-by-parts (YaRN, Peng et al. 2023; Llama-3 is the same idea without the
  attention temperature) leaves the fast frequencies alone and divides the
  slow ones by s. YaRN works without finetuning at moderate ratios (Qwen2.5
  ships it for 32k -> 128k, s = 4) and needs ~10x fewer finetune tokens than
  PI; it was finetuned to s = 16 and 32. Llama-3's scaling is Meta's recipe
  for Llama 3.1: factor 8 on an 8k original context, served to 128k (16x),
  with long-context training.
- Dynamic NTK (HF "dynamic") rescales the base only once the sequence is
  longer than N, so short inputs are untouched; it needs no training and
  degrades gracefully, so it is the no-training choice past ~4x, and for
  encoders, which see each input's whole length at once.
"""
import argparse
import json
import math
import sys

__all__ = ["recommend", "rope_base_for", "RULES", "TABLE", "ADVICE", "main"]

#: rule id -> short description.
RULES = {
    "K1": "existing RoPE model, target within the training context: keep it",
    "E1": "encoder from scratch, short fixed length: learned absolute",
    "E2": "encoder from scratch, longer serving context: ALiBi (symmetric)",
    "E3": "encoder from scratch, long fixed context: RoPE with a large base",
    "E4": "existing RoPE encoder, no training: dynamic NTK",
    "P1": "decoder from scratch, served within the training context: RoPE with a base for N",
    "P2": "decoder from scratch, served beyond the training context: ALiBi",
    "N1": "existing RoPE decoder, no training, moderate ratio: YaRN",
    "N2": "existing RoPE decoder, no training, large ratio: dynamic NTK",
    "F1": "finetune, ratio <= 2: linear / position interpolation",
    "F2": "finetune, ratio 2..8: Llama-3 scaling",
    "F3": "finetune, ratio > 8: YaRN",
}


def _parse_table(doc):
    """The decision table of this module's docstring, as data: a list of
    (rule, architectures, budgets, conditions) rows, conditions a list of
    (variable, op, number) triples all of which must hold."""
    rows = []
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("| ") \
            else None
        if not cells or cells[0] not in RULES:
            continue
        rule, arch, budget, cond = cells[:4]
        archs = ("decoder", "encoder") if arch == "any" else (arch,)
        budgets = tuple(budget.split("/"))
        conds = []
        for part in cond.split(","):
            toks = part.split()
            # "r <= 1", "M > 512", "1 < r <= 4"
            if len(toks) == 3:
                conds.append((toks[0], toks[1], float(toks[2])))
            elif len(toks) == 5 and toks[1] == "<":
                conds.append((toks[2], ">", float(toks[0])))
                conds.append((toks[2], toks[3], float(toks[4])))
            else:
                raise ValueError("pick: cannot read the condition %r of rule %s" % (part, rule))
        rows.append((rule, archs, budgets, conds))
    return rows


#: The decision table, read from the docstring above (its specification).
TABLE = _parse_table(__doc__)

_OPS = {"<=": lambda a, b: a <= b, "<": lambda a, b: a < b, ">": lambda a, b: a > b,
        ">=": lambda a, b: a >= b}

# Reasons two rules give alike (an encoder's and a decoder's).
_ROPE_BASE_REASONS = [
    "RoPE encodes relative position in q.k and is what current {arch}s use.",
    "Base {base:g}: the base bounds the context a model can really use; Men et al. 2024 fit the "
    "lower bound 0.0424*N^1.628 = {bound:.3g} for N = {n}, rounded up here (Llama 3: 500000 at "
    "8k; Qwen2.5, Mistral: 1000000 at 32k).",
    "Longer contexts later: YaRN or Llama-3 scaling from this base (see the none/finetune rows)."]
_ALIBI_REASONS = [
    "Trained at {n} but served at {m} ({r:.3g}x): ALiBi adds a fixed linear distance penalty "
    "instead of an embedding, so nothing new appears beyond the training length and it "
    "extrapolates without any change (Press et al. 2022).",
    "Slopes 2^(-8k/n_heads) (BLOOM interleaving for other head counts): "
    "posenc.alibi_slopes(n_heads)."]

#: What each rule recommends. encoding, summary (a template), scaling (the HF
#: rope_type and its extra keys; factor is always the ratio), config (which
#: config.json fields: "scaled", "learned", "alibi", "base"), confidence
#: ((level, max ratio, level above it); default high), reasons and
#: alternatives (templates; a (condition, text) pair is used when the
#: condition holds). Template fields: n, m, r, s, n4, base (B(N)), base_m
#: (B(M)), bound (0.0424 N^1.628), temp (YaRN's 0.1 ln r + 1), arch.
ADVICE = {
    "K1": dict(
        encoding="rope", summary="RoPE as trained, no rope_scaling",
        reasons=["The target context {m} is within the {n} tokens the model was trained at: "
                 "every rotation angle it will meet was seen in training.",
                 "Any rope_scaling would only blur the positions it already knows."]),
    "E1": dict(
        encoding="learned", summary="learned absolute position embeddings, max_len {n}",
        config="learned",
        reasons=["Inputs are short (<= 512) and never longer than the training length, the one "
                 "case where learned absolute embeddings (BERT) lose nothing.",
                 "They cannot extrapolate: a position beyond the table has no embedding "
                 "(libposenc's pe_learned_add reports it as an error), so the length is fixed "
                 "at {n} for good."],
        alternatives=["RoPE (base 10000) if inputs may later grow: ModernBERT, NomicBERT"]),
    "E2": dict(
        encoding="alibi", summary="ALiBi (symmetric), max_bias 8", config="alibi",
        confidence=("medium", 8, "low"),
        reasons=_ALIBI_REASONS + [
            "Encoders use the symmetric bias -m*|i-j| (MosaicBERT, Jina-BERT v2: trained at "
            "128/512, run at 8192), which is what pe_alibi_add_bias adds."],
        alternatives=["RoPE with base {base_m:g} trained at the full {m} tokens, if the "
                      "compute allows"]),
    "E3": dict(
        encoding="rope", summary="RoPE, base {base:g}", config="base",
        reasons=_ROPE_BASE_REASONS,
        alternatives=["learned absolute only if inputs stay <= 512"]),
    "E4": dict(
        encoding="rope+dynamic", summary="RoPE + dynamic NTK, factor {s:g}", scaling=("dynamic",),
        config="scaled", confidence=("medium", 4, "low"),
        reasons=["No training: dynamic NTK raises the base only for inputs longer than {n}, by "
                 "(s*L/{n} - s + 1)^(d/(d-2)) for an input of L tokens, so inputs within the "
                 "training length are untouched.",
                 "An encoder sees each input's whole length at once, so the scale fits each "
                 "input exactly (nomic-embed-text: 2048 -> 8192 this way).",
                 "Keep max_position_embeddings at {n}: HF's dynamic rule scales from it."],
        alternatives=["YaRN factor {s:g} with a short finetune"]),
    "P1": dict(
        encoding="rope", summary="RoPE, base {base:g}", config="base",
        reasons=_ROPE_BASE_REASONS,
        alternatives=["ALiBi if the model must later run beyond {n} without any training"]),
    "P2": dict(
        encoding="alibi", summary="ALiBi, max_bias 8", config="alibi",
        confidence=("medium", 8, "low"),
        reasons=_ALIBI_REASONS + [
            "The penalty favours recent tokens: the model stays fluent beyond {n} but retrieves "
            "less from far back than a RoPE model trained long."],
        alternatives=["RoPE with base {base:g} at {n}, then a long-context stage with Llama-3 "
                      "or YaRN scaling (the Llama 3.1 / Qwen2.5 recipe) if long-range retrieval "
                      "matters"]),
    "N1": dict(
        encoding="rope+yarn", summary="RoPE + YaRN, factor {s:g}, original context {n}",
        scaling=("yarn", "original"), config="scaled",
        reasons=["No training at a moderate ratio ({r:.3g}x): YaRN (NTK-by-parts) keeps the fast "
                 "frequencies that resolve nearby tokens, divides the slow ones (wavelength "
                 "longer than the training context) by {s:g}, and ramps in between "
                 "(Peng et al. 2023).",
                 "Its attention temperature 0.1*ln(s)+1 = {temp:.3f} (applied to cos/sin by the "
                 "library) counters the flatter attention at longer lengths.",
                 "Qwen2.5 ships exactly this for 32k -> 128k (factor 4) without finetuning.",
                 "Static: inputs shorter than {n} are also scaled, a small cost on short texts."],
        alternatives=["dynamic NTK (factor {s:g}) to leave inputs <= {n} exactly as trained",
                      "Llama-3 scaling, the same idea without the temperature"]),
    "N2": dict(
        encoding="rope+dynamic", summary="RoPE + dynamic NTK, factor {s:g}", scaling=("dynamic",),
        config="scaled", confidence=("medium", 8, "low"),
        reasons=["No training at a large ratio ({r:.3g}x): a fixed stretch this large hurts "
                 "every input, while dynamic NTK raises the base only as far as the current "
                 "length needs, (s*L/{n} - s + 1)^(d/(d-2)), and leaves inputs <= {n} exact.",
                 "Keep max_position_embeddings at {n}: HF's dynamic rule scales from it.",
                 "Like NTK-aware scaling it divides the middle frequencies by less than the "
                 "ratio, so a few of them still reach angles unseen in training (the library "
                 "check counts them): part of why quality falls.",
                 "Without training, quality falls past ~4-8x whatever the method; plan a "
                 "finetune (rows F1-F3) for the best long-context results."],
        alternatives=["YaRN factor {s:g} with a short finetune (~400 steps in Peng et al.)"]),
    "F1": dict(
        encoding="rope+linear", summary="RoPE + linear (PI), factor {s:g}", scaling=("linear",),
        config="scaled",
        reasons=["A finetune is available and the ratio is small ({r:.3g}x): position "
                 "interpolation divides every frequency by {s:g} so positions up to {m} map "
                 "into the trained range (Chen et al. 2023).",
                 "PI needs that finetune (about 1000 steps in the paper) to recover; at <= 2x "
                 "the loss of local resolution is small, and every runtime supports "
                 "\"linear\"."],
        alternatives=["YaRN factor {s:g}: needs fewer finetune steps"]),
    "F2": dict(
        encoding="rope+llama3", summary="RoPE + Llama-3 scaling, factor {s:g}, original context "
                                        "{n}",
        scaling=("llama3", "original", ("low_freq_factor", 1.0), ("high_freq_factor", 4.0)),
        config="scaled",
        reasons=["Finetune at {r:.3g}x: Llama-3 scaling leaves frequencies with wavelength < "
                 "{n4} (N/4) alone, divides those with wavelength > {n} (N) by {s:g} and "
                 "blends between: local order stays sharp while the slow frequencies are "
                 "interpolated.",
                 "Meta's recipe for Llama 3.1 (factor 8 on an 8k original context, served to "
                 "128k: 16x) with long-context training."],
        alternatives=["YaRN factor {s:g} (the same split plus an attention temperature)",
                      "linear (PI) factor {s:g}: simpler, more finetuning"]),
    "F3": dict(
        encoding="rope+yarn", summary="RoPE + YaRN, factor {s:g}, original context {n}",
        scaling=("yarn", "original"), config="scaled", confidence=("medium", 32, "low"),
        reasons=["Finetune at a large ratio ({r:.3g}x): YaRN reached s = 16 and 32 on Llama 2 "
                 "with about 400 finetune steps (Peng et al. 2023), keeping the fast "
                 "frequencies and dividing the slow ones by {s:g}.",
                 "Its attention temperature 0.1*ln(s)+1 = {temp:.3f} matters more at large "
                 "ratios (attention entropy grows with the length).",
                 ("r > 32", "Beyond 32x, extend in stages (LongRoPE, progressive YaRN) rather "
                            "than in one step.")],
        alternatives=["LongRoPE (searched per-frequency factors) for the largest ratios",
                      "Llama-3 factor {s:g}"]),
}


def rope_base_for(context):
    """A RoPE base for a training context: the smallest 1, 2 or 5 x 10^k at
    or above max(10000, 0.0424 * context^1.628) (Men et al. 2024)."""
    bound = max(10000.0, 0.0424 * float(context) ** 1.628)
    k = math.floor(math.log10(bound))
    for exp in (k, k + 1):
        for m in (1, 2, 5):
            v = m * 10.0 ** exp
            if v >= bound * (1 - 1e-12):
                return float(v)
    return float(10.0 ** (k + 1))


def _num(x):
    """A float that prints as an int when it is one (factor 4.0, not 4.000001)."""
    x = float(x)
    return float(round(x, 6))


def _holds(conds, values):
    return all(_OPS[op](values[var], num) for var, op, num in conds)


def _rule_for(n, m, budget, architecture):
    values = {"r": m / n, "M": m, "N": n}
    for rule, archs, budgets, conds in TABLE:
        if architecture in archs and budget in budgets and _holds(conds, values):
            return rule
    raise AssertionError("pick: no rule of the table matches (n %d, m %d, %s, %s)"
                         % (n, m, budget, architecture))


def _texts(items, fields, values):
    out = []
    for item in items:
        if isinstance(item, tuple):
            cond, item = item
            var, op, num = cond.split()
            if not _OPS[op](values[var], float(num)):
                continue
        out.append(item.format(**fields))
    return out


def recommend(train_context, target_context, budget="none", architecture="decoder"):
    """The recommendation for one set of inputs, as a dict:
    rule, encoding, summary, rope_theta (or None), rope_scaling (HF dict or
    None), config (the config.json fields to set), alibi (or None),
    confidence, reasons, alternatives."""
    n, m = int(train_context), int(target_context)
    if n <= 0 or m <= 0:
        raise ValueError("contexts must be positive, got train %d, target %d" % (n, m))
    if budget not in ("none", "finetune", "pretrain"):
        raise ValueError("budget must be none, finetune or pretrain, got %r" % budget)
    if architecture not in ("decoder", "encoder"):
        raise ValueError("architecture must be decoder or encoder, got %r" % architecture)
    r = m / n
    s = _num(r)
    rule = _rule_for(n, m, budget, architecture)
    adv = ADVICE[rule]
    fields = dict(n=n, m=m, r=r, s=s, n4=n // 4, base=rope_base_for(n), base_m=rope_base_for(m),
                  bound=0.0424 * n ** 1.628, temp=0.1 * math.log(r) + 1 if r > 0 else 1.0,
                  arch=architecture)
    rec = {"train_context": n, "target_context": m, "ratio": s, "budget": budget,
           "architecture": architecture, "rope_theta": None, "rope_scaling": None,
           "config": {}, "alibi": None, "confidence": "high"}
    if "confidence" in adv:
        level, limit, above = adv["confidence"]
        rec["confidence"] = level if r <= limit else above
    kind = adv.get("config")
    if kind == "scaled":
        rtype, *extra = adv["scaling"]
        d = {"rope_type": rtype, "factor": s}
        for e in extra:
            if e == "original":
                d["original_max_position_embeddings"] = n
            else:
                d[e[0]] = e[1]
        rec["rope_scaling"] = d
        # dynamic grows the base from max_position_embeddings (it must stay N);
        # the others read original_max_position_embeddings from the dict.
        rec["config"] = {"max_position_embeddings": n if rtype == "dynamic" else m,
                         "rope_scaling": d}
    elif kind == "learned":
        rec["config"] = {"position_embedding_type": "absolute", "max_position_embeddings": n}
    elif kind == "alibi":
        rec["alibi"] = {"max_bias": 8.0, "symmetric": architecture == "encoder"}
        rec["config"] = {"position_embedding_type": "alibi", "alibi_max_bias": 8.0}
    elif kind == "base":
        rec["rope_theta"] = fields["base"]
        rec["config"] = {"rope_theta": fields["base"], "max_position_embeddings": n,
                         "rope_scaling": None}
    values = {"r": r, "M": m, "N": n}
    rec.update(rule=rule, rule_text=RULES[rule], encoding=adv["encoding"],
               summary=adv["summary"].format(**fields),
               reasons=_texts(adv["reasons"], fields, values),
               alternatives=_texts(adv.get("alternatives", ()), fields, values))
    return rec


def library_check(rec, head_dim=128, rope_theta=10000.0, n_heads=None):
    """Run the recommendation through libposenc (the binding): build the RoPE
    cache its rope_scaling describes and report the library's attention
    factor and how many frequencies reach, at the target, angles they never
    reached in training; or compute the ALiBi slopes for n_heads. Returns a
    dict (stored as rec["check"]); needs the library."""
    import numpy as np
    import posenc
    n, m = rec["train_context"], rec["target_context"]
    check = {"head_dim": int(head_dim), "rope_theta": float(rec["rope_theta"] or rope_theta)}
    if rec["encoding"].startswith("rope"):
        plain = posenc.RopeCache(head_dim=head_dim, rope_theta=check["rope_theta"],
                                 max_positions=0)
        cache = plain
        if rec["rope_scaling"]:
            cache = posenc.RopeCache(head_dim=head_dim, rope_theta=check["rope_theta"],
                                     max_positions=0, rope_scaling=rec["rope_scaling"],
                                     seq_len=m,
                                     max_position_embeddings=rec["config"].get(
                                         "max_position_embeddings", m))
        trained = n * plain.inv_freq.astype(np.float64)      # max angle seen in training
        served = m * cache.inv_freq.astype(np.float64)       # max angle at the target
        # a frequency that completed a turn in training has seen every angle
        new = (trained < 2 * math.pi) & (served > trained * (1 + 1e-6))
        check.update(attention_factor=cache.attention_factor,
                     frequencies=int(served.size), unseen_angle_frequencies=int(new.sum()))
    elif rec["encoding"] == "alibi" and n_heads:
        check["alibi_slopes"] = [float(v) for v in posenc.alibi_slopes(int(n_heads))]
    rec["check"] = check
    return check


def format_text(rec):
    lines = ["Recommendation: %s" % rec["summary"],
             "  rule %s (%s); confidence %s" % (rec["rule"], rec["rule_text"], rec["confidence"]),
             "  train %d -> target %d tokens (%.3gx), budget %s, %s" % (
                 rec["train_context"], rec["target_context"], rec["ratio"], rec["budget"],
                 rec["architecture"])]
    if rec["rope_theta"] is not None:
        lines.append("  rope_theta: %g" % rec["rope_theta"])
    if rec["encoding"].startswith("rope"):
        lines.append("  rope_scaling: %s" % json.dumps(rec["rope_scaling"]))
    if rec["config"]:
        lines.append("  config.json: %s" % json.dumps(rec["config"]))
    lines.append("Why:")
    lines += ["  - %s" % t for t in rec["reasons"]]
    if rec["alternatives"]:
        lines.append("Alternatives:")
        lines += ["  - %s" % t for t in rec["alternatives"]]
    c = rec.get("check")
    if c and "unseen_angle_frequencies" in c:
        lines.append("Library check (head_dim %d, base %g): attention factor %.6g; %d of %d "
                     "frequencies reach angles at %d that they never reached in training"
                     % (c["head_dim"], c["rope_theta"], c["attention_factor"],
                        c["unseen_angle_frequencies"], c["frequencies"], rec["target_context"]))
    elif c and "alibi_slopes" in c:
        lines.append("Library check: ALiBi slopes for %d heads: %s" % (
            len(c["alibi_slopes"]), ", ".join("%.6g" % v for v in c["alibi_slopes"])))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m posenc.tools.pick",
        description="Recommend a positional encoding and its rope_scaling (see the decision "
                    "table in docs/explore.md).")
    ap.add_argument("--train-context", type=int, required=True,
                    help="context the model was (or will be) trained at")
    ap.add_argument("--target-context", type=int, required=True,
                    help="context it must serve")
    ap.add_argument("--budget", choices=("none", "finetune", "pretrain"), default="none",
                    help="none: an existing RoPE model, no training (default); finetune: a "
                         "short long-context finetune; pretrain: training from scratch")
    ap.add_argument("--architecture", choices=("decoder", "encoder"), default="decoder")
    ap.add_argument("--json", metavar="OUT", default=None,
                    help="write the recommendation (with rope_scaling) as JSON; - for stdout")
    ap.add_argument("--head-dim", type=int, default=128,
                    help="head size for the library check (128)")
    ap.add_argument("--rope-theta", type=float, default=10000.0,
                    help="the existing model's RoPE base, for the library check (10000)")
    ap.add_argument("--n-heads", type=int, default=None,
                    help="heads: print the ALiBi slopes when ALiBi is recommended")
    ap.add_argument("--no-check", action="store_true",
                    help="do not load libposenc to check the recommendation")
    args = ap.parse_args(argv)
    try:
        rec = recommend(args.train_context, args.target_context, args.budget, args.architecture)
    except ValueError as e:
        print("pick: %s" % e, file=sys.stderr)
        return 2
    if not args.no_check:
        try:
            library_check(rec, args.head_dim, args.rope_theta, args.n_heads)
        except ImportError as e:   # the recommendation stands without the library
            print("pick: library check skipped: %s" % str(e).splitlines()[0], file=sys.stderr)
        except (ValueError, RuntimeError) as e:
            print("pick: library check failed: %s" % e, file=sys.stderr)
            return 1
    if args.json == "-":
        print(json.dumps(rec, indent=2))
        return 0
    print(format_text(rec))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rec, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
