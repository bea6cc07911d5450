#!/bin/sh
# bench-results.sh - run `make bench` and write its results table into the
# README's Results section, for the CPU kind of this machine.
#
# The Results section holds one table per CPU kind, each between
#   <!-- bench-results: KIND -->  and  <!-- /bench-results: KIND -->
# (KIND: intel-xeon-avx512fp16, amd-epyc-zen5, amd-epyc-zen4, amd-epyc-zen3, or a name made from the CPU
# model). This script replaces the block of this machine's kind (or adds one
# before <!-- /bench-results -->) with: the command, the date, the CPU, the
# load average, and the table of the run, in the columns of pe-bench's own
# --wide table (a subset, same names: the IQR column is the spread the '!'
# flag uses). Rows pe-bench flags '!' (measured while disturbed) keep their '!'
# and the header counts them: rerun on a quiet machine rather than publish
# them.
#
# Usage: scripts/bench-results.sh [--build DIR] [--reps N] [--print] [-- PE_BENCH_ARGS...]
#   --build DIR  build directory (default: build)
#   --reps N     repetitions (default: pe-bench's, 15, as `make bench`)
#   --print      print the block instead of writing README.md
# Environment: SETTLE=N waits at most N s (default 120) after the build for
# the load average to fall below 0.75 x the CPU count.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
build=build reps="" print=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --print) print=1; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-results: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
args="--csv${reps:+ --reps $reps}${*:+ $*}"
shown="pe-bench${reps:+ --reps $reps}${*:+ $*}"   # the run's command, as make bench runs it
tmp=$(mktemp -d "${TMPDIR:-/tmp}/posenc-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# The CPU kind, from the vendor, family and features.
vendor=$(sed -n 's/^vendor_id[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
family=$(sed -n 's/^cpu family[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
cpumodel=$(sed -n 's/^model[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
flags=$(sed -n 's/^flags[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
has() { case " $flags " in *" $1 "*) return 0 ;; esac; return 1; }
features="AVX2"
has avx512f && features="AVX-512"
has avx512_bf16 && features="$features + BF16"
has avx512_fp16 && features="$features + FP16" || { has avx512f && features="$features, no FP16"; }
if [ "$vendor" = AuthenticAMD ] && [ "$family" = 25 ] && has avx512f; then
  kind=amd-epyc-zen4 title="AMD EPYC Zen 4"
elif [ "$vendor" = AuthenticAMD ] && [ "$family" = 25 ] && [ "$cpumodel" -lt 16 ]; then
  kind=amd-epyc-zen3 title="AMD EPYC Zen 3"  # family 25 models 0-15: Zen 3 (Milan); no AVX-512
elif [ "$vendor" = AuthenticAMD ] && [ "$family" = 26 ]; then
  kind=amd-epyc-zen5 title="AMD EPYC Zen 5"  # family 26 (0x1a): Zen 5 (Turin)
elif [ "$vendor" = GenuineIntel ] && has avx512_fp16; then
  kind=intel-xeon-avx512fp16 title="Intel Xeon with AVX-512 FP16"
else
  kind=$(echo "$model" | tr 'A-Z' 'a-z' | sed 's/([^)]*)//g; s/[^a-z0-9]\{1,\}/-/g; s/^-//; s/-$//')
  title=$model
fi
cpus=$(nproc)
hyp=$(lscpu 2>/dev/null | sed -n 's/^Hypervisor vendor:[[:space:]]*//p')

# Build first, with the build directory's own -Werror setting (a different
# one would reconfigure and rebuild everything), then let the load average
# the compilers raised settle: pe-bench flags rows measured while it exceeds
# the CPU count.
case "$build" in /*) cache=$build/CMakeCache.txt ;; *) cache=$src/$build/CMakeCache.txt ;; esac
werror=$(sed -n 's/^PE_WERROR:BOOL=//p' "$cache" 2>/dev/null || true)
make --no-print-directory -C "$src" build BUILD="$build" WERROR="${werror:-OFF}" >&2
waited=0
while [ "$waited" -lt "${SETTLE:-120}" ] &&
      awk -v c="$cpus" '{exit !($1 >= 0.75 * c)}' /proc/loadavg; do
  [ "$waited" = 0 ] && echo "bench-results: waiting (up to ${SETTLE:-120} s) for the load average $(cut -d' ' -f1 /proc/loadavg) to fall below $(awk -v c="$cpus" 'BEGIN{print 0.75 * c}')" >&2
  sleep 5
  waited=$((waited + 5))
done
load0=$(cut -d' ' -f1 /proc/loadavg)
echo "bench-results: $title ($kind), $cpus CPUs, load average $load0: make bench BENCH_ARGS=\"$args\"" >&2
# The same run as `make bench` (build, then pe-bench), machine-readable.
make --no-print-directory -C "$src" bench BUILD="$build" WERROR="${werror:-OFF}" BENCH_ARGS="$args" > "$tmp/out" \
  || { cat "$tmp/out" >&2; exit 1; }
grep -v '^make: ' "$tmp/out" > "$tmp/bench.csv"
load1=$(cut -d' ' -f1 /proc/loadavg)
isa=$(awk -F, 'NR == 2 {print $4}' "$tmp/bench.csv")
date=$(date -u +%Y-%m-%d)

/usr/bin/python3 - "$tmp/bench.csv" "$tmp/block" <<EOF
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
def num(v, digits):
    if v in ("", None): return "-"
    x = float(v)
    return "%.4g" % x if abs(x) >= 100000 and digits > 0 else "%.*f" % (digits, x)
def ns(v):
    if v in ("", None): return "-"
    x = float(v)
    return "%.0f" % x if x >= 100 else "%.1f" % x
cols = ["suite", "case", "shape", "dtype", "threads", "GB/s", "ns/call (median)",
        "IQR p25..p75 (% of median)", "x stream bound", "x floor", "x textbook loop", "x textbook-native",
        "x 1 thread", "note"]
out = ["| " + " | ".join(cols) + " |", "|---|---|---|---|" + "--:|" * (len(cols) - 5) + "---|"]
flagged = 0
for r in rows:
    if r["gbps"] == "" and r["ns_median"] == "":
        cells = ([r["suite"], r["case"], r.get("shape") or "-", r["dtype"], r["threads"]] +
                 ["-"] * (len(cols) - 6) + [r["note"]])
    else:
        note = r["note"]
        if r.get("flag"):
            flagged += 1
            note = "! " + r["flag"] + ("; " + note if note else "")
        iqr = r["iqr_fraction"]
        cells = [r["suite"], r["case"], r.get("shape") or "-", r["dtype"], r["threads"], num(r["gbps"], 1),
                 ns(r["ns_median"]), num(str(100 * float(iqr)) if iqr else "", 0),
                 num(r["ratio_bound"], 2), num(r.get("ratio_floor") or "", 2), num(r["ratio_textbook"], 2),
                 num(r["ratio_textbook_native"], 2), num(r["speedup_vs_1_thread"], 2), note]
    out.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
head = ("From one \`make bench\` run (\`$shown\`: %s repetitions, written by "
        "\`scripts/bench-results.sh\`) on %s: %s (family $family model $cpumodel), $cpus vCPUs%s, "
        "%s; %s path; load average $load0 at the start, $load1 at the end." %
        ("$reps" or "15", "$date", "$model".strip(), " under $hyp" if "$hyp" else "", "$features",
         "$isa"))
if flagged:
    head += (" **%d of %d rows are flagged '!'** (measured while disturbed: see the note)." %
             (flagged, len(rows)))
else:
    head += " No row flagged '!' (disturbed)."
with open(sys.argv[2], "w") as f:
    f.write("<!-- bench-results: $kind -->\n### $title\n\n" + head + "\n\n" +
            "\n".join(out) + "\n<!-- /bench-results: $kind -->\n")
EOF

if [ "$print" = 1 ]; then cat "$tmp/block"; exit 0; fi
readme="$src/README.md"
grep -q '^<!-- /bench-results -->$' "$readme" \
  || { echo "bench-results: README.md has no '<!-- /bench-results -->' marker" >&2; exit 1; }
awk -v kind="$kind" -v block="$tmp/block" '
  function put() { while ((getline l < block) > 0) print l; close(block); done = 1 }
  $0 == "<!-- bench-results: " kind " -->" { skip = 1; next }
  skip && $0 == "<!-- /bench-results: " kind " -->" { skip = 0; put(); next }
  skip { next }
  $0 == "<!-- /bench-results -->" && !done { put(); print ""; }
  { print }
' "$readme" > "$tmp/README.md"
cp "$tmp/README.md" "$readme"
echo "bench-results: README.md: the $title table ($date, $(grep -c '^| ' "$tmp/block") lines)" >&2
