#!/bin/sh
# check_bench_targets.sh PYTHON SCRIPT PE_BENCH - scripts/bench-targets.py:
# its verdicts on two made-up rounds whose values sit on either side of each
# target (the median of the rounds decides; the rounds meeting it counted),
# its refusals, and one real round of pe-bench (one repetition) read back.
py=$1
script=$2
bench=$3
failed=0
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# One round: the three commands' outputs, each after its header (the
# script tells them apart by the header's rank). Columns as pe-bench --csv.
head='suite,case,dtype,isa,threads,bytes,gbps,ns_median,ns_min,ns_max,ns_p25,ns_p75,iqr_fraction,bound_ns_median,ratio_bound,textbook_ns_median,ratio_textbook,textbook_native_ns_median,ratio_textbook_native,speedup_vs_1_thread,note,loadavg_max,cpu_wait_fraction,run_queue_mean,flag,shape,floor_ns_median,ratio_floor'
# row SUITE CASE DTYPE THREADS NS RATIO_BOUND RATIO_TEXTBOOK SPEEDUP FLOOR_NS RATIO_FLOOR
# (the bound's time 100 ns in every row)
row() {
  echo "$1,$2,$3,avx2,$4,1,1,$5,1,1,1,1,0,100,$6,1,$7,,,$8,\"a note, with a comma\",0,0,0,,s,$9,${10}"
}
round() { # $1: bhtd bf16 x floor, $2: f32 decode 1 ns, $3: 2-thread speedup
  echo "$head"
  row rope "llama3-8b prefill 512 bhtd" bf16 1 100 0.5 "" "" 90 "$1"
  row rope "llama3-8b prefill 512 bthd" bf16 1 100 0.5 "" "" 90 0.80
  row rope "llama3-8b prefill 32 bthd" f32 1 100 0.50 "" "" 50 0.50
  row rope "llama3-8b prefill 512 bthd" f32 1 100 0.86 "" "" 50 0.86
  row fused "store k llama3-8b 1x4096" f32 1 100 0.84 "" "" 50 0.84
  row qknorm "qwen3-8b decode 32x1" f32 1 100 0.81 "" "" 185 0.9
  row qknorm "qwen3-8b decode 1x1" bf16 1 1300 0.2 "" "" 1000 0.9
  row qknorm "qwen3-8b decode 1x1" f32 1 "$2" 0.2 "" "" 1000 0.9
  row qknorm "qwen3-8b prefill 1x512" bf16 1 100 0.2 1.79 "" 90 0.9
  echo "$head"
  row rope "llama3-8b 128 tok x1 bthd" f32 1 100 0.9 "" "" 90 0.9
  row rope "llama3-8b 128 tok x1 bthd" f32 2 60 0.9 "" "$3" 90 0.9
  echo "$head"
  row fused "store q+k qwen3-8b 1x1" bf16 1 1000 0.3 "" "" 400 0.3
  row fused "store q+k qwen3-8b 1x1" f32 1 1000 0.3 "" "" 500 0.3
}
round 0.79 1400 1.69 >"$dir/r1.csv"
round 0.85 1200 1.75 >"$dir/r2.csv"
out="$dir/out"
if "$py" "$script" --from-csv "$dir/r1.csv" "$dir/r2.csv" >"$out" 2>&1; then
  # target name, case, value, met, note: one line each
  check() {
    if grep -Eq "$1" "$out"; then echo "ok   $2"; else fail "$2: no line matching '$1' in: $(cat "$out")"; fi
  }
  check '^f16/bf16 x floor +rope +llama3-8b prefill 512 bhtd +bf16 +0\.82 \(0\.79\.\.0\.85\) +>= 0\.8 +1/2 *$' \
        "median of two rounds meets the target, one round of two counted"
  check '^f16/bf16 x floor +rope +llama3-8b prefill 512 bthd +bf16 +0\.80 \(0\.80\.\.0\.80\) +>= 0\.8 +2/2 *$' \
        "a value on the target meets it"
  check '^f32 512\+ tokens x bound +fused +store k llama3-8b 1x4096 +f32 +0\.84 .* 0/2 +BELOW; floor/bound 0\.50$' \
        "an f32 row of 4096 tokens below 0.85, its floor over its bound"
  check '^QK-norm f32 x bound +qknorm +qwen3-8b decode 32x1 +f32 +0\.81 .* 2/2 +floor/bound 1\.85$' \
        "QK-norm f32 decode 32"
  check '^QK-norm decode 1 / store +qknorm +decode 1x1 / store q\+k 1x1 +bf16 +1\.30 .*<= 1\.3 +2/2 +floors 2\.50x apart$' \
        "the decode ratio at the limit (at most), its floors' ratio"
  check '^QK-norm decode 1 / store +qknorm +decode 1x1 / store q\+k 1x1 +f32 +1\.30 \(1\.20\.\.1\.40\) +<= 1\.3 +1/2 +floors 2\.00x apart$' \
        "the decode ratio's median of 1.2 and 1.4"
  check '^QK-norm x unfused +qknorm +qwen3-8b prefill 1x512 +bf16 +1\.79 .* 0/2 +BELOW$' "fused over unfused below 1.8"
  check '^2 threads / 1 thread +rope +llama3-8b 128 tok x1 bthd +f32 2 threads +1\.72 \(1\.69\.\.1\.75\) +>= 1\.7 +1/2 *$' \
        "the pool's speedup"
  check '^9 of 11 rows meet their target; 2 below$' "the count"
  if grep -q 'prefill 32 bthd' "$out"; then fail "an f32 row of 32 tokens was held to the 512-token target"; fi
  if grep -q 'x floor .*store q+k qwen3-8b' "$out"; then fail "the third command's store rows were held to the floor target"; fi
else
  fail "bench-targets --from-csv exited $?: $(cat "$out")"
fi
# expect WHAT ARGS -- PATTERN...: bench-targets ARGS succeeds and prints a
# line matching each PATTERN
expect() {
  what=$1
  shift
  args=
  while [ "$1" != "--" ]; do args="$args $1"; shift; done
  shift
  # shellcheck disable=SC2086
  if "$py" "$script" $args >"$out" 2>&1; then
    for want in "$@"; do
      grep -Eq "$want" "$out" && echo "ok   $what: $want" || fail "$what: no '$want' in: $(cat "$out")"
    done
  else
    fail "$what: bench-targets$args exited $?: $(cat "$out")"
  fi
}

# two paths in one round (as --isa all takes them): one table each, counted
# per path, the header rank of the second path's commands counted anew
{ round 0.79 1400 1.69; round 0.85 1200 1.75 | sed 's/,avx2,/,avx512,/'; } >"$dir/r3.csv"
expect "two paths" --from-csv "$dir/r3.csv" -- '^== path avx2 ==$' '^== path avx512 ==$' \
  '^f16/bf16 x floor +rope +llama3-8b prefill 512 bhtd +bf16 +0\.79 +>= 0\.8 +0/1 +BELOW$' \
  '^f16/bf16 x floor +rope +llama3-8b prefill 512 bhtd +bf16 +0\.85 +>= 0\.8 +1/1 *$' \
  '^2 threads / 1 thread +rope +llama3-8b 128 tok x1 bthd +f32 2 threads +1\.75 +>= 1\.7 +1/1 *$' \
  '^per path: avx2 6 of 11, avx512 9 of 11$'
"$py" "$script" --from-csv "$dir/r1.csv" --strict >/dev/null 2>&1
[ $? -eq 1 ] && echo "ok   --strict exits 1 below a target" || fail "--strict did not exit 1"

# refusals: status 2 and a line naming the value
for args in "--rounds 0" "--reps x" "--from-csv /nonexistent.csv" "--bogus" \
            "--from-csv $dir/r1.csv --diagnose" "--bench /nonexistent"; do
  # shellcheck disable=SC2086
  "$py" "$script" $args >"$out" 2>&1
  st=$?
  if [ "$st" -eq 2 ] && grep -q '^bench-targets: ' "$out"; then
    echo "ok   refused: $args"
  else
    fail "$args: status $st, $(cat "$out")"
  fi
done

# one real round, one repetition: every command ran and was read back
expect "real round" --bench "$bench" --rounds 1 --reps 1 -- \
  '^f16/bf16 x floor +rope +llama3-8b prefill 512 bhtd +f16 ' \
  '^QK-norm decode 1 / store +qknorm +decode 1x1 / store q\+k 1x1 +f32 ' \
  '^2 threads / 1 thread +rope +llama3-8b 128 tok x1 bhtd ' \
  '^[0-9]+ of [0-9]+ rows meet their target; [0-9]+ below$'

[ "$failed" -eq 0 ] && echo "bench-targets checks passed" && exit 0
echo "$failed bench-targets check(s) failed"
exit 1
