#!/usr/bin/env python3
"""bench-targets.py - the library's performance targets, checked on this CPU.

libposenc's serving paths have targets (docs/bench.md, "Performance
targets"): each f16/bf16 row at 0.8 of its compute floor or better, each
f32 row of 512 tokens or more at 0.85 of the stream bound, the QK-norm
step's own targets, and the thread pool's scaling. A single pe-bench run
says little on a shared machine, so this script runs the same pe-bench
commands several rounds and reports, per target and row, the median of the
rounds' values with their range and how many rounds met the target.

A row held to the stream bound also shows floor/bound: its compute floor's
time over the bound's (above 1 the arithmetic alone takes longer than
streaming the bytes, so the bound cannot be reached).

With --diagnose, one more round runs the rows with the floor's own kernels
walking the call's rows (pe-bench --floor-data call) and prints, for each
row below an 'x floor' target, the library's speed against theirs ('x call floor':
max(bound, that time) / library time): at or above 1 the library runs its
rows' bytes at least as fast as the shortest instruction sequence meeting
the same caches, and what is left is the core's overlap of the two (see
docs/compute-floor.md, "When x floor stays below 1 on large calls").

Usage: scripts/bench-targets.py [--bench PATH] [--rounds N] [--reps N]
                                [--isa NAME] [--diagnose] [--strict]
                                [--from-csv FILE ...]
  --bench PATH  the pe-bench binary (default: build/bench/pe-bench)
  --rounds N    rounds (default 5); a round runs the three commands below
  --reps N      pe-bench's --reps (default: pe-bench's own, 15)
  --isa NAME    pe-bench's --isa (default: the best path of this CPU); all:
                each vector path this CPU runs (pe-bench --isa all's but
                scalar, the reference), taken in turn within every round,
                one table each
  --diagnose    one more round with --floor-data call, for the rows below
  --strict      exit 1 when a target is not met (default: a report, exit 0)
  --from-csv F  evaluate saved `pe-bench --csv` outputs instead of running
                pe-bench (each file one round: the three commands' outputs
                in order, once per path when they hold several; the rows
                are grouped by their isa column)

The commands of a round (each with --csv, and --reps/--isa when given):
  pe-bench --suite rope,fused,kvquant,qknorm --threads 1
  pe-bench --suite rope --tokens 128 --dtype f32 --threads 1,2
  pe-bench --suite fused --model qwen3-8b --tokens 1 --threads 1
"""
import csv
import os
import re
import statistics
import subprocess
import sys

from bench_common import cpu_name, option_value, positive_int, print_table

COMMANDS = [
    ["--suite", "rope,fused,kvquant,qknorm", "--threads", "1"],
    ["--suite", "rope", "--tokens", "128", "--dtype", "f32", "--threads", "1,2"],
    ["--suite", "fused", "--model", "qwen3-8b", "--tokens", "1", "--threads", "1"],
]


def usage(msg):
    print(f"bench-targets: {msg} (see --help)", file=sys.stderr)
    sys.exit(2)


def parse_args(argv):
    opt = {"bench": "build/bench/pe-bench", "rounds": 5, "reps": None, "isa": None,
           "diagnose": False, "strict": False, "from_csv": []}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            print(__doc__)
            sys.exit(0)
        if a in ("--diagnose", "--strict"):
            opt[a[2:]] = True
            i += 1
            continue
        if a == "--from-csv":
            files = []
            i += 1
            while i < len(argv) and not argv[i].startswith("--"):
                files.append(argv[i])
                i += 1
            if not files:
                usage("--from-csv needs at least one file")
            opt["from_csv"] += files
            continue
        if a in ("--bench", "--rounds", "--reps", "--isa"):
            opt[a[2:]] = option_value(argv, i, usage)
            i += 2
            continue
        usage(f"unknown argument {a}")
    for key in ("rounds", "reps"):
        if opt[key] is not None:
            positive_int(opt, key, usage)
    if opt["from_csv"]:
        if opt["diagnose"]:
            usage("--diagnose runs pe-bench; it cannot be combined with --from-csv")
        for f in opt["from_csv"]:
            if not os.path.isfile(f):
                usage(f"--from-csv {f}: no such file")
    elif not os.access(opt["bench"], os.X_OK):
        usage(f"--bench {opt['bench']}: not an executable")
    return opt


def read_rows(text):
    """pe-bench --csv output (COMMANDS' outputs appended, in order, once per
    path when a round took several) as dicts."""
    rows = []
    header, command = None, -1
    for line in text.splitlines():
        if line.startswith("suite,"):
            header = next(csv.reader([line]))
            command += 1
            continue
        if not line.strip() or header is None:
            continue
        row = dict(zip(header, next(csv.reader([line]))))
        # which of COMMANDS printed it: its header's rank, counted per path
        row["command"] = command % len(COMMANDS)
        rows.append(row)
    return rows


def bench(opt, args):
    """pe-bench's standard output for these arguments; exit when it fails."""
    args = [opt["bench"]] + args
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stderr, file=sys.stderr, end="")
        sys.exit(f"bench-targets: `{' '.join(args)}` failed with status {p.returncode}")
    return p.stdout


def run_round(opt, isa, extra=(), commands=COMMANDS):
    """One round on one path (isa None: pe-bench's choice): each of
    commands run once (with extra), its rows read."""
    out = []
    for cmd in commands:
        args = ["--csv"] + cmd + list(extra)
        if opt["reps"]:
            args += ["--reps", str(opt["reps"])]
        if isa:
            args += ["--isa", isa]
        out.append(bench(opt, args))
    return read_rows("\n".join(out))


def vector_paths(opt):
    """The paths --isa all takes: every one pe-bench runs on this CPU but scalar."""
    rows = read_rows(bench(opt, ["--csv", "--suite", "rope", "--tokens", "1", "--dtype", "f32",
                                 "--threads", "1", "--reps", "1", "--isa", "all"]))
    paths = [r["isa"] for r in rows if r["isa"] != "scalar"]
    if not paths:
        sys.exit("bench-targets: --isa all: this CPU runs no vector path (scalar only)")
    return list(dict.fromkeys(paths))


def num(r, key):
    v = r.get(key, "")
    try:
        return float(v)
    except ValueError:
        return None


def tokens_of(case):
    """Tokens per sequence of a case name: 'prefill 512 ...', '... 1x4096', '512 tok'."""
    m = re.search(r"\b\d+x(\d+)\b", case) or re.search(r"prefill (\d+)", case) or \
        re.search(r"\b(\d+) tok\b", case)
    if m:
        return int(m.group(1))
    return 1 if "decode" in case else None


def key_of(r):
    """A row's label: suite, case, dtype (with its thread count past one)."""
    threads = "" if r["threads"] == "1" else f" {r['threads']} threads"
    return (r["suite"], r["case"], r["dtype"] + threads)


def floor_over_bound(r):
    """A row held to the stream bound: its compute floor's time over the
    bound's, when known (above 1 the arithmetic alone is slower than
    streaming the bytes, and the bound cannot be reached)."""
    f, b = num(r, "floor_ns_median"), num(r, "bound_ns_median")
    return f / b if f and b else None


def rows_where(test, column, extra=None):
    """pick(rows) for a target read from one column: (label, value, extra)
    for each row passing test that has a value there."""
    def pick(rows):
        for r in rows:
            v = num(r, column)
            if v is not None and test(r):
                yield key_of(r), v, extra(r) if extra else None
    return pick


SERVING = ("rope", "fused", "kvquant")


def first_command(r, suites, dtypes, threads="1"):
    """r is a row of COMMANDS[0] (the third's one-token store rows are only
    the decode ratio's reference) of these suites and dtypes."""
    return r["command"] == 0 and r["suite"] in suites and r["dtype"] in dtypes and \
        r["threads"] == threads


def decode_ratio_rows(rows):
    """The QK-norm step of one token against pe_apply_rope_qk_store alone (q+k)."""
    norm = {r["dtype"]: r for r in rows
            if r["suite"] == "qknorm" and r["threads"] == "1" and
            r["case"] == "qwen3-8b decode 1x1"}
    store = {r["dtype"]: r for r in rows
             if r["suite"] == "fused" and r["threads"] == "1" and r["case"] == "store q+k qwen3-8b 1x1"}
    for dt in sorted(set(norm) & set(store)):
        a, b = num(norm[dt], "ns_median"), num(store[dt], "ns_median")
        fa, fb = num(norm[dt], "floor_ns_median"), num(store[dt], "floor_ns_median")
        if a and b:
            floors = f"floors {fa / fb:.2f}x apart" if fa and fb else None
            yield ("qknorm", "decode 1x1 / store q+k 1x1", dt), a / b, floors


# The targets: (name, threshold, at_most (the value is to be at most the
# threshold, else at least), pick(rows) -> (label, value, extra) per row,
# whether the value is an x floor (the rows --diagnose explains)).
TARGETS = [
    ("f16/bf16 x floor", 0.8, False,
     rows_where(lambda r: first_command(r, SERVING, ("f16", "bf16")), "ratio_floor"), True),
    ("f32 512+ tokens x bound", 0.85, False,
     rows_where(lambda r: first_command(r, SERVING, ("f32",)) and (tokens_of(r["case"]) or 0) >= 512,
                "ratio_bound", floor_over_bound), False),
    ("QK-norm f32 x bound", 0.8, False,
     rows_where(lambda r: first_command(r, ("qknorm",), ("f32",)) and
                ("decode 32x1" in r["case"] or "prefill 1x512" in r["case"]),
                "ratio_bound", floor_over_bound), False),
    ("QK-norm f16/bf16 x floor", 0.8, False,
     rows_where(lambda r: first_command(r, ("qknorm",), ("f16", "bf16")), "ratio_floor"), True),
    ("QK-norm decode 1 / store", 1.3, True, decode_ratio_rows, False),
    ("QK-norm x unfused", 1.8, False,
     rows_where(lambda r: first_command(r, ("qknorm",), ("bf16",)) and "prefill 1x512" in r["case"],
                "ratio_textbook"), False),
    ("2 threads / 1 thread", 1.7, False,
     rows_where(lambda r: r["suite"] == "rope" and r["dtype"] == "f32" and r["threads"] == "2" and
                tokens_of(r["case"]) == 128, "speedup_vs_1_thread"), False),
]


def note_of(extras):
    """A row's extra across the rounds: a number (the floor over the bound)
    as its median, a text (the decode ratio's floors) as the last round's."""
    if not extras:
        return ""
    if isinstance(extras[-1], str):
        return extras[-1]
    return f"floor/bound {statistics.median(extras):.2f}"


def evaluate(rounds):
    """[(target, threshold, at_most, is_floor, [(key, values, extra)])] over the rounds."""
    out = []
    for name, thr, at_most, pick, is_floor in TARGETS:
        keyed, order, extras = {}, [], {}
        for rows in rounds:
            for item in pick(rows):
                key, value, extra = item
                if key not in keyed:
                    keyed[key] = []
                    order.append(key)
                keyed[key].append(value)
                if extra is not None:
                    extras.setdefault(key, []).append(extra)
        out.append((name, thr, at_most, is_floor,
                    [(k, keyed[k], note_of(extras.get(k))) for k in order]))
    return out


def met(v, thr, at_most):
    return v <= thr if at_most else v >= thr


def report(opt, rounds, isa):
    """The targets' table for the rows of one path (isa; "" when the rows
    name none); returns (rows, rows below)."""
    results = evaluate(rounds)
    below = [(name, key) for name, thr, at_most, _, items in results
             for key, vals, _ in items if not met(statistics.median(vals), thr, at_most)]
    diag = {}
    if opt["diagnose"] and below:
        print(f"[diagnose{' ' + isa if isa else ''}: a round with --floor-data call]",
              file=sys.stderr)
        for r in run_round(opt, isa or opt["isa"], ["--floor-data", "call"], COMMANDS[:1]):
            v = num(r, "ratio_floor")
            if v is not None:
                diag[key_of(r)] = v
    table = [("target", "suite", "case", "dtype", "value", "target", "met", "")]
    for name, thr, at_most, is_floor, items in results:
        bound = ("<= " if at_most else ">= ") + f"{thr:g}"
        if not items:
            table.append((name, "-", "(no row in these runs)", "-", "-", bound, "-", ""))
        for key, vals, extra in items:
            med = statistics.median(vals)
            ok = sum(met(v, thr, at_most) for v in vals)
            value = f"{med:.2f}" + (f" ({min(vals):.2f}..{max(vals):.2f})" if len(vals) > 1 else "")
            note = [] if met(med, thr, at_most) else ["BELOW"]
            if extra:
                note.append(extra)
            if is_floor and key in diag and not met(med, thr, at_most):
                note.append(f"x call floor {diag[key]:.2f}")
            table.append((name, key[0], key[1], key[2], value, bound, f"{ok}/{len(vals)}",
                          "; ".join(note)))
    print_table(table)
    total = sum(len(items) for *_, items in results)
    print(f"\n{total - len(below)} of {total} rows meet their target; {len(below)} below")
    return total, len(below)


def main():
    opt = parse_args(sys.argv[1:])
    rounds = []
    if opt["from_csv"]:
        for f in opt["from_csv"]:
            with open(f) as fh:
                rounds.append(read_rows(fh.read()))
        source = f"{len(rounds)} saved run(s): {' '.join(opt['from_csv'])}"
    else:
        paths = vector_paths(opt) if opt["isa"] == "all" else [opt["isa"]]
        for i in range(opt["rounds"]):
            rows = []
            for isa in paths:  # the paths alternated within each round
                rows += run_round(opt, isa)
            rounds.append(rows)
            print(f"[round {i + 1}/{opt['rounds']}]", file=sys.stderr)
        source = (f"{opt['rounds']} rounds on {cpu_name()}, {os.cpu_count()} CPUs"
                  + (f", --isa {opt['isa']}" if opt["isa"] else "")
                  + (f", --reps {opt['reps']}" if opt["reps"] else ""))
    isas = list(dict.fromkeys(r.get("isa", "") for rows in rounds for r in rows)) or [""]
    print(f"bench-targets: {source}; path {', '.join(i for i in isas if i) or '?'}")
    print("value: the median over the rounds (min..max); met: rounds meeting the target")
    counts = []
    for isa in isas:
        if len(isas) > 1:
            print(f"\n== path {isa} ==")
        counts.append(report(opt, [[r for r in rows if r.get("isa", "") == isa]
                                   for rows in rounds], isa))
    if len(isas) > 1:
        print("\nper path: " + ", ".join(f"{isa} {n - b} of {n}"
                                         for isa, (n, b) in zip(isas, counts)))
    if opt["strict"] and any(b for _, b in counts):
        sys.exit(1)


if __name__ == "__main__":
    main()
