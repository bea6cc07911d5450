#!/usr/bin/env python3
"""bench-compare.py - one pe-bench binary run against two builds of
libposenc, alternated, and each row's time compared.

The machines the library is measured on are shared: their speed moves by
tens of percent between runs, so two runs one after the other say little
about a change. This script runs the same pe-bench command N rounds, each
round once per library (the order swapped every round, so a slow drift
weighs on both sides alike), and reports per row:

  base ns, new ns   the medians over the rounds of pe-bench's median
  new/base          the time ratio of each round (median, min..max)
  new/base vs ref   the same ratio with each run's time divided first by
                    the row's reference measured in that run (the larger
                    of its stream bound and its compute floor): a change
                    in the machine's speed between two runs moves the
                    kernel and its reference together, so this column
                    keeps what the change did and drops most of the drift

A ratio below 1 is faster. The library is chosen by LD_LIBRARY_PATH, which
pe-bench's RUNPATH lets override; the script checks that each run loaded
the library it was given.

Usage: scripts/bench-compare.py --base DIR [--new DIR] [--rounds N]
                                [--bench PATH] [-- PE_BENCH_ARGS...]
  --base DIR    directory holding the previous build's libposenc.so.0
  --new DIR     directory holding the new one (default: build)
  --rounds N    rounds (default 4); each runs pe-bench twice
  --bench PATH  the pe-bench binary (default: build/bench/pe-bench)
  PE_BENCH_ARGS pe-bench's arguments (e.g. --suite qknorm --threads 1);
                --csv is added, --json and --csv are refused
"""
import csv
import io
import os
import statistics
import subprocess
import sys

from bench_common import cpu_name, option_value, positive_int, print_table


def usage(msg):
    print(f"bench-compare: {msg} (see --help)", file=sys.stderr)
    sys.exit(2)


def parse_args(argv):
    opt = {"base": None, "new": "build", "rounds": 4, "bench": "build/bench/pe-bench"}
    rest = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            rest = argv[i + 1:]
            break
        if a in ("-h", "--help"):
            print(__doc__)
            sys.exit(0)
        if a in ("--base", "--new", "--rounds", "--bench"):
            opt[a[2:]] = option_value(argv, i, usage)
            i += 2
            continue
        usage(f"unknown argument {a}")
    if not opt["base"]:
        usage("--base DIR is required")
    positive_int(opt, "rounds", usage)
    for key in ("base", "new"):
        lib = os.path.join(opt[key], "libposenc.so.0")
        if not os.path.exists(lib):
            usage(f"--{key} {opt[key]}: no libposenc.so.0 there")
    if not os.access(opt["bench"], os.X_OK):
        usage(f"--bench {opt['bench']}: not an executable")
    for a in rest:
        if a in ("--csv", "--json"):
            usage(f"{a} is the script's to add")
    return opt, rest


def loaded_library(bench, libdir):
    """The libposenc.so.0 the dynamic loader picks for pe-bench with libdir first."""
    env = dict(os.environ, LD_LIBRARY_PATH=libdir)
    out = subprocess.run(["ldd", bench], env=env, capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "libposenc.so.0" in line and "=>" in line:
            return os.path.realpath(line.split("=>")[1].split("(")[0].strip())
    return None


def run(bench, libdir, args):
    env = dict(os.environ, LD_LIBRARY_PATH=libdir)
    p = subprocess.run([bench, "--csv"] + args, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stderr, file=sys.stderr, end="")
        sys.exit(f"bench-compare: pe-bench failed with status {p.returncode} ({libdir})")
    rows = {}
    order = []
    for r in csv.DictReader(io.StringIO(p.stdout)):
        key = (r["suite"], r["case"], r["dtype"], r["threads"])
        t = float(r["ns_median"])
        refs = [float(r[k]) for k in ("bound_ns_median", "floor_ns_median") if r.get(k)]
        rows[key] = (t, max(refs) if refs else None, r.get("flag", ""))
        order.append(key)
    return order, rows


def span(values, fmt="{:.2f}"):
    if not values:
        return "-"
    med = statistics.median(values)
    if len(values) == 1:
        return fmt.format(med)
    return f"{fmt.format(med)} ({fmt.format(min(values))}..{fmt.format(max(values))})"


def main():
    opt, args = parse_args(sys.argv[1:])
    libs = {}
    for key in ("base", "new"):
        libs[key] = loaded_library(opt["bench"], opt[key])
        want = os.path.realpath(os.path.join(opt[key], "libposenc.so.0"))
        if libs[key] != want:
            sys.exit(f"bench-compare: with --{key} {opt[key]} pe-bench loads {libs[key]}, not {want}")
    if libs["base"] == libs["new"]:
        print("bench-compare: note: --base and --new are the same library", file=sys.stderr)
    order, samples = None, {"base": [], "new": []}
    for i in range(opt["rounds"]):
        sides = ("base", "new") if i % 2 == 0 else ("new", "base")
        for side in sides:
            o, rows = run(opt["bench"], opt[side], args)
            order = order or o
            samples[side].append(rows)
            print(f"[round {i + 1}/{opt['rounds']}: {side}]", file=sys.stderr)
    print(f"bench-compare on {cpu_name()}, {os.cpu_count()} CPUs: pe-bench {' '.join(args)}")
    print(f"base {libs['base']}")
    print(f"new  {libs['new']}")
    print(f"{opt['rounds']} rounds, each library once a round, the order swapped every round; "
          "ratios below 1: new is faster; '!': a run of the row pe-bench flagged disturbed")
    print()
    head = ("suite", "case", "dtype", "thr", "base ns", "new ns", "new/base", "new/base vs ref")
    table = [head]
    for key in order:
        b = [r[key] for r in samples["base"] if key in r]
        n = [r[key] for r in samples["new"] if key in r]
        k = min(len(b), len(n))
        if not k:
            continue
        ratio = [n[i][0] / b[i][0] for i in range(k)]
        norm = [(n[i][0] / n[i][1]) / (b[i][0] / b[i][1]) for i in range(k) if n[i][1] and b[i][1]]
        flag = "!" if any(x[2] for x in b + n) else ""
        table.append((key[0], key[1] + (" !" if flag else ""), key[2], key[3],
                      f"{statistics.median(x[0] for x in b):.0f}",
                      f"{statistics.median(x[0] for x in n):.0f}", span(ratio), span(norm)))
    print_table(table, left=4)


if __name__ == "__main__":
    main()
