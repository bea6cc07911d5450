#!/bin/sh
# walk-ab.sh - measure the engine's memory-walk rules on this CPU, each
# against its alternative, with pe-ab (both builds in one process, calls
# alternated on the same buffers, their bytes compared first).
#
# run_walk (src/rope/engine.c) picks, per call, by the AMD cpuid family:
#  - four memory streams for calls past half the last-level cache (AMD Zen
#    1-4: PE_STREAMS_AMD_MIN..MAX), else token order with the rows' software
#    prefetch;
#  - the rows' software prefetch (whole rows a few KiB ahead, a normed
#    block's successor) only from half the last-level cache (Zen 5 on:
#    PE_NEAR_L3_AMD_MIN), else from a thread's L2 share (normed blocks
#    always).
# This script builds the library four more times with those knobs moved so
# that each rule applies to every CPU (streams / tokens, nearl3 / farl3),
# and times each against the build as it is (base) on the calls the rules
# decide. On any CPU one of each pair is the base's own rule: its ratios
# show the noise of the run. Then, where the CPU has AVX-512, the base
# build's avx2 path against its AVX-512 paths on the k cache write (pe-ab
# --new-isa): on an AMD EPYC Zen 5 the 256-bit rows took 0.83-0.84 of the
# time of the 512-bit ones for k alone in [B,T,H,D] at 4096 f32 tokens and
# 1.14-1.16 in [B,H,T,D] (docs/compute-floor.md); other CPUs not measured yet.
#
# Usage: scripts/walk-ab.sh [--build DIR] [--samples N] [--out DIR]
#   --build DIR    the project's build (default build), for pe-ab and base
#   --samples N    pe-ab samples per case (default 40)
#   --out DIR      where the variants are built (default /tmp/walk-ab)
# Prints one line per case and variant: new/base, the median of the pairs'
# ratios (below 1: the variant is faster), with its quartiles.
# shellcheck disable=SC2086 # $llama is split into pe-ab's words on purpose
set -eu
build=build samples=40 out=/tmp/walk-ab
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --samples) samples=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 && !/shellcheck/ { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "walk-ab.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
src=$(cd "$(dirname "$0")/.." && pwd)
ab=$build/bench/pe-ab
base=$build/libposenc.so
if [ ! -x "$ab" ] || [ ! -f "$base" ]; then
  echo "walk-ab.sh: build $build first (pe-ab, libposenc.so)" >&2
  exit 1
fi

variant() { # name, C flags
  if ! { cmake -S "$src" -B "$out/$1" -DCMAKE_BUILD_TYPE=Release -DPE_BUILD_BENCH=OFF \
           -DCMAKE_C_FLAGS="$2" && cmake --build "$out/$1" --target posenc -j2; } \
       > "$out/$1.log" 2>&1; then
    tail -20 "$out/$1.log" >&2
    exit 1
  fi
}
mkdir -p "$out"
variant streams "-DPE_STREAMS_AMD_MIN=0 -DPE_STREAMS_AMD_MAX=255"
variant tokens "-DPE_STREAMS_AMD_MIN=1 -DPE_STREAMS_AMD_MAX=0"
variant nearl3 "-DPE_NEAR_L3_AMD_MIN=0"
variant farl3 "-DPE_NEAR_L3_AMD_MIN=256"

grep -m1 'model name' /proc/cpuinfo 2>/dev/null || true
grep -m1 'cpu family' /proc/cpuinfo 2>/dev/null || true
echo "pe-ab --samples $samples; new/base below 1: the variant is faster"
llama="--heads 32 --kv-heads 8 --theta 500000" # split into words where used
ab_line() { # first column, label, pe-ab arguments past --base: one line of new/base
  col=$1 label=$2
  shift 2
  r=$("$ab" --base "$base" --samples "$samples" --same-bytes "$@" 2>&1 |
    sed -n 's/^new\/base: \([0-9.]*\), the median of the pairs. ratios (quartiles \([0-9.]*\.\.[0-9.]*\)).*/\1 (\2)/p')
  printf '%-15s %-44s %s\n' "$col" "$label" "${r:-failed}"
}
run() { # variant, label, pe-ab arguments: the variant's build against the base
  v=$1 label=$2
  shift 2
  ab_line "$v" "$label" --new "$out/$v/libposenc.so" "$@"
}
for v in streams tokens; do
  for dt in f32 bf16; do
    for t in 1024 2048 4096; do
      run $v "rope llama3-8b bthd $dt $t tokens" --case rope --layout bthd --dtype $dt --tokens $t $llama
    done
    run $v "store q+k llama3-8b bthd $dt 4096 tokens" --case store --dtype $dt --tokens 4096 $llama
  done
  run $v "rope llama3-8b bthd bf16 4x512" --case rope --layout bthd --dtype bf16 --batch 4 --tokens 512 $llama
done
for v in nearl3 farl3; do
  for t in 128 512 1024 2048; do
    run $v "rope qwen3-8b bthd f32 $t tokens" --case rope --layout bthd --dtype f32 --tokens $t
  done
  run $v "rope qwen3-8b bthd bf16 2048 tokens" --case rope --layout bthd --dtype bf16 --tokens 2048
  for t in 64 256 512 1024; do
    run $v "qknorm qwen3-8b f32 $t tokens" --case qknorm --dtype f32 --tokens $t
  done
  run $v "qknorm qwen3-8b bf16 1024 tokens" --case qknorm --dtype bf16 --tokens 1024
done
# The avx2 path (256-bit rows) against each AVX-512 path of the same build.
runisa() { # base path, label, pe-ab arguments: the base build's avx2 path against that path
  isa=$1 label=$2
  shift 2
  ab_line "avx2/$isa" "$label" --new "$base" --base-isa "$isa" --new-isa avx2 "$@"
}
paths=" $("$src/scripts/isa-paths.sh" -q "$base" | tr '\n' ' ')"
for isa in avx512 avx512bf16; do
  case "$paths" in *" $isa "*) ;; *) continue ;; esac
  case "$paths" in *" avx2 "*) ;; *) continue ;; esac
  for lay in bthd bhtd; do
    runisa $isa "store k llama3-8b $lay f32 4096 tokens" --case store --no-q --layout $lay --dtype f32 --tokens 4096 $llama
  done
  runisa $isa "store q+k llama3-8b bthd f32 4096 tokens" --case store --dtype f32 --tokens 4096 $llama
  runisa $isa "store k llama3-8b bthd bf16 4096 tokens" --case store --no-q --dtype bf16 --tokens 4096 $llama
done
