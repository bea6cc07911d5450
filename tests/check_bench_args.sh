#!/bin/sh
# pe-bench's command line: every bad invocation below must stop before
# measuring anything with exit status 2, nothing on stdout and exactly one
# line on stderr that names the offending value; then a few good ones must
# run (--model list with the published models, one quick measured case, the
# label of an overridden shape, DeepSeek-V3's MLA rope shape, the mla
# suite's rows, the narrow table within 120 columns).
# usage: check_bench_args.sh PE_BENCH
bench=$1
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# bad NEEDLE ARG...: pe-bench ARG... exits 2, prints nothing on stdout and
# one stderr line containing NEEDLE.
bad() {
  needle=$1
  shift
  "$bench" "$@" >"$out" 2>"$err"
  rc=$?
  shown="pe-bench $*"
  if [ "$rc" -ne 2 ]; then fail "$shown: exit $rc, not 2"; return; fi
  if [ -s "$out" ]; then fail "$shown: wrote to stdout: $(head -c 200 "$out")"; return; fi
  lines=$(wc -l <"$err")
  if [ "$lines" -ne 1 ]; then fail "$shown: $lines lines on stderr: $(cat "$err")"; return; fi
  if ! grep -q -F -- "$needle" "$err"; then fail "$shown: stderr lacks '$needle': $(cat "$err")"; return; fi
  echo "ok   $shown -> $(cat "$err")"
}

bad '--rotary-dim 7 is odd' --rotary-dim 7
bad '--head-dim 7 is odd' --head-dim 7
bad '--rotary-dim 256 is more than' --rotary-dim 256
bad '--max-positions 8192 is fewer than the 100000 positions' --tokens 100000 --max-positions 8192
bad '--max-positions 4000' --suite rope --max-positions 4000
bad '--suite "" names no suite' --suite ""
bad 'unknown suite "foo"' --suite rope,foo
bad '--suite "rope,,t5" has an empty name' --suite rope,,t5
bad '--json and --csv' --json --csv
bad '--wide and --json' --wide --json
bad '--dtype "fp8"' --dtype fp8
bad '--style "alibi"' --style alibi
bad '--layout "bsd"' --layout bsd
bad '--isa "sse9"' --isa sse9
bad '--model "llama9"' --model llama9
bad '--threads expects an integer in [1, 64], got "0"' --threads 0
bad 'got "65"' --threads 1,65
bad '--threads "1,1" lists 1 twice' --threads 1,1
bad '--threads "" names no thread count' --threads ""
bad '--threads "1,,2" has an empty count' --threads 1,,2
cpus=$(nproc)
if [ "$cpus" -lt 64 ]; then
  bad "--threads $((cpus + 1)): this process may run on $cpus CPU" --threads $((cpus + 1))
fi
bad '--reps expects an integer in [1, 100000], got "0"' --reps 0
bad 'got "abc"' --reps abc
bad '--warmup expects an integer in [0, 100000], got "-1"' --warmup -1
bad '--tokens expects an integer in [1, 4194304], got "0"' --tokens 0
bad '--batch expects an integer in [1, 4096], got "-2"' --batch -2
bad '--heads expects an integer in [1, 4096], got "0"' --heads 0
bad '--kv-heads expects an integer in [1, 4096], got "0"' --kv-heads 0
bad '--max-positions expects an integer in [0, 1073741824], got "-1"' --max-positions -1
bad '--reps given twice ("3", then "4")' --reps 3 --reps 4
bad '--reps needs a value' --reps
bad 'unknown option "--frobnicate"' --frobnicate
bad 'unknown option "rope"' rope
bad '--tokens shapes the' --suite alibi --tokens 8
bad '--max-positions shapes the rope suite only' --suite t5 --max-positions 0
bad '--dtype shapes the' --suite table,cutover --dtype bf16
bad '--tokens 4096 with the learned suite' --suite learned --tokens 4096
bad '--batch 1100 with the learned suite' --suite learned --batch 1100
bad '--model gpt-j and --hf-config' --model gpt-j --hf-config /nonexistent.json
bad '--head-dim 64 with --hf-config' --hf-config /nonexistent.json --head-dim 64
bad 'needs about' --suite rope --tokens 4194304 --batch 4096
bad '--model shapes the' --suite mla --model gpt-j
bad 'needs about' --suite mla --tokens 200000 --batch 8
bad '--layout shapes the' --suite mla --layout bthd
bad '--fresh-cache expects auto or an integer in [1, 1048576], got "0"' --fresh-cache 0
bad 'got "4k"' --fresh-cache 4k
bad '--floor-data expects l1 or call, got "L2"' --floor-data L2
bad '--stream-cache shapes the fused,qknorm,kvquant,mla suites only' --suite rope,t5 --stream-cache
bad '--fresh-cache shapes the fused,qknorm,kvquant,mla suites only' --suite rope --fresh-cache 4
bad '--fresh-cache: the largest case needs about' --suite fused --fresh-cache 100000

# --model list: the presets, with the published numbers of the newer models.
if "$bench" --model list >"$out" 2>"$err"; then
  for want in 'qwen3-8b +32 +8 +128 +128 +neox +1e\+06' 'gemma-3-27b +32 +16 +128 +128 +neox +1e\+06 +linear x8' \
              'deepseek-v3 +128 +1 +192 +64 +gptj +10000 +yarn x40' 'llama3-8b +32 +8 +128 +128 +neox +500000'; do
    grep -q -E "^$want" "$out" || fail "--model list lacks a line matching '$want': $(cat "$out")"
  done
  echo "ok   pe-bench --model list"
else
  fail "--model list exited $?: $(cat "$err")"
fi

# A quick measured run: two rows (both layouts), numbers in every timing field.
quick="--tokens 4 --threads 1 --reps 3 --warmup 0"
# shellcheck disable=SC2086
if "$bench" --suite rope $quick --csv >"$out" 2>"$err"; then
  # fields 1-20 (suite .. speedup_vs_1_thread) are never quoted, nor the last three
  # (shape, floor_ns_median, ratio_floor)
  awk -F, -v want_bytes=$(( 2 * (32 + 8) * 4 * 128 * 4 )) '
    NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    { n++
      want = n == 1 ? "llama3-8b 4 tok x1 bhtd" : "llama3-8b 4 tok x1 bthd"
      if ($2 != want) { print "row " n ": case \"" $2 "\", not \"" want "\""; bad = 1 }
      if ($(NF - 2) != "32q/8kv x128 neox") { print "row " n ": shape \"" $(NF - 2) "\""; bad = 1 }
      if ($col["bytes"] != want_bytes) { print "row " n ": bytes " $col["bytes"]; bad = 1 }
      split("ns_median bound_ns_median ratio_bound textbook_ns_median", f, " ")
      for (i = 1; i <= 4; i++)
        if (!($col[f[i]] + 0 > 0)) { print "row " n ": " f[i] " \"" $col[f[i]] "\""; bad = 1 }
      # the compute floor (kernels for every path but NEON), counted from the end
      if ($4 != "neon" && !($(NF - 1) > 0 && $NF > 0)) {
        print "row " n ": floor_ns_median \"" $(NF - 1) "\", ratio_floor \"" $NF "\""; bad = 1 } }
    END { if (n != 2) { print n " rows, not 2"; bad = 1 }; exit bad }' "$out" \
    && echo "ok   pe-bench --suite rope $quick --csv: 2 rows measured" \
    || fail "pe-bench --suite rope $quick --csv: $(cat "$out")"
else
  fail "pe-bench --suite rope $quick --csv exited $?: $(cat "$err")"
fi

# --isa all: a row per path this CPU runs (scalar always), each named in the
# narrow table's isa column, the header naming no single path.
# shellcheck disable=SC2086
if "$bench" --suite rope $quick --layout bthd --isa all >"$out" 2>"$err"; then
  paths=$(awk '$1 == "llama3-8b" && $6 == "f32" { print $7 }' "$out" | tr '\n' ' ')
  case "$paths" in
    scalar*) grep -q 'library path each one this CPU runs (isa column)' "$out" \
               && grep -Eq '^case +dtype +isa +ns/call' "$out" \
               && echo "ok   --isa all: rows of $paths" \
               || fail "--isa all: header or isa column missing: $(cat "$out")" ;;
    *) fail "--isa all: no scalar row first (paths: '$paths'): $(cat "$out")" ;;
  esac
else
  fail "--isa all exited $?: $(cat "$err")"
fi

# An overridden shape is "custom", with the shape it has.
# shellcheck disable=SC2086
if "$bench" --suite rope $quick --layout bhtd --heads 16 --csv >"$out" 2>"$err"; then
  grep -q '^rope,custom 4 tok x1 bhtd,.*,16q/8kv x128 neox,[0-9.e+]*,[0-9.e+]*$' "$out" \
    || fail "--heads 16 on llama3-8b: not a 'custom' row of shape 16q/8kv x128 neox: $(cat "$out")"
  echo "ok   --heads 16: labelled custom"
else
  fail "--heads 16 exited $?: $(cat "$err")"
fi

# DeepSeek-V3: 128 q heads of 192 channels, 64 rotated, interleaved; one k head.
# shellcheck disable=SC2086
if "$bench" --suite rope $quick --layout bhtd --model deepseek-v3 --csv >"$out" 2>"$err"; then
  grep -q '^rope,deepseek-v3 4 tok x1 bhtd,f32,[a-z0-9]*,1,[0-9]*,[0-9.]*,[0-9.]*,.*,128q/1kv x192 rot64 gptj,' "$out" \
    || fail "--model deepseek-v3: no measured row of shape 128q/1kv x192 rot64 gptj: $(cat "$out")"
  grep -q '^rope,deepseek-v3 4 tok x1 bhtd,f32,[a-z0-9]*,1,'"$(( (128 + 1) * 4 * 64 * 4 * 2 ))"',' "$out" \
    || fail "--model deepseek-v3: bytes are not (128 + 1) heads x 4 tokens x 64 rotated x 4 B x 2"
  echo "ok   --model deepseek-v3: 128q/1kv x192 rot64 gptj"
else
  fail "--model deepseek-v3 exited $?: $(cat "$err")"
fi

# The mla suite: DeepSeek-V3's MLA step in each cache format, its bytes
# (q's rope slices read and written, the kv row read, the cache row written:
# 656 bytes for fp8_ds), a floor and an unfused sequence (none for fp8_ds).
# shellcheck disable=SC2086
if "$bench" --suite mla $quick --dtype bf16 --csv >"$out" 2>"$err"; then
  awk -F, -v q=$(( 2 * 128 * 64 * 2 )) '
    NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    { n++
      split("prefill 1x4,fp8 prefill 1x4,fp8_ds prefill 1x4", names, ",")
      split("1152,576,656", rows, ",")
      if ($2 != names[n]) { print "row " n ": case \"" $2 "\""; bad = 1 }
      if ($(NF - 2) != "128q x192 rot64 gptj kv 512+64") { print "row " n ": shape " $(NF - 2); bad = 1 }
      if ($col["bytes"] != 4 * (q + 1152 + rows[n])) { print "row " n ": bytes " $col["bytes"]; bad = 1 }
      if ($4 != "neon" && !($(NF - 1) > 0)) { print "row " n ": no floor"; bad = 1 }
      if ((n < 3) != ($col["ratio_textbook"] > 0)) { print "row " n ": ratio_textbook \"" $col["ratio_textbook"] "\""; bad = 1 } }
    END { if (n != 3) { print n " rows, not 3"; bad = 1 }; exit bad }' "$out" \
    && echo "ok   pe-bench --suite mla $quick --dtype bf16 --csv: 3 rows measured" \
    || fail "pe-bench --suite mla $quick --dtype bf16 --csv: $(cat "$out")"
else
  fail "pe-bench --suite mla $quick --dtype bf16 --csv exited $?: $(cat "$err")"
fi

# The qknorm suite's one-pass native loop agrees with the library (or the
# row's note says where not) and is timed: ratio_textbook_native in each row
# (f32 and bf16 by default; f16 asked for; OLMo 2's per-token norm, Gemma
# 3's unit offset, Llama 4's L2 norm on interleaved pairs).
for dt in "" "--dtype f16" "--model olmo2-7b" "--model gemma-3-27b" "--model llama4-scout"; do
  rows=2
  [ "$dt" = "--dtype f16" ] && rows=1
  # shellcheck disable=SC2086
  if "$bench" --suite qknorm $quick $dt --csv >"$out" 2>"$err"; then
    awk -F, -v rows=$rows '
      NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
      { n++
        if (!($col["ratio_textbook_native"] > 0)) { print "row " n ": " $0; bad = 1 } }
      END { if (n != rows) { print n " rows, not " rows; bad = 1 }; exit bad }' "$out" \
      && echo "ok   pe-bench --suite qknorm $quick $dt --csv: the native loop timed in $rows rows" \
      || fail "pe-bench --suite qknorm $quick $dt --csv: $(cat "$out")"
  else
    fail "pe-bench --suite qknorm $quick $dt --csv exited $?: $(cat "$err")"
  fi
done

# --fresh-cache: every serving suite measures each of its rows with the
# caches' slots in K sets (the library refuses a slot past its cache, so a
# set outside the caches would leave its row unmeasured), the qknorm suite's
# native loop still agreeing with the library on the first set; the fused
# calls with PE_ROPE_STREAM_CACHE (--stream-cache).
# shellcheck disable=SC2086
if "$bench" --suite fused,qknorm,kvquant,mla $quick --dtype bf16 --fresh-cache 3 --stream-cache --csv >"$out" 2>"$err"; then
  awk -F, '
    NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    { n++; suites[$1]++
      if (!($col["ns_median"] > 0 && $col["bound_ns_median"] > 0)) { print "row " n ": " $0; bad = 1 }
      if ($1 == "qknorm" && !($col["ratio_textbook_native"] > 0)) { print "native: " $0; bad = 1 } }
    END { if (suites["fused"] != 5 || suites["qknorm"] != 1 || suites["kvquant"] != 2 || suites["mla"] != 3) {
            print "rows per suite: fused " suites["fused"] ", qknorm " suites["qknorm"] ", kvquant " \
                  suites["kvquant"] ", mla " suites["mla"]; bad = 1 }
          exit bad }' "$out" \
    && echo "ok   pe-bench --suite fused,qknorm,kvquant,mla $quick --fresh-cache 3: every row measured" \
    || fail "pe-bench --fresh-cache 3: $(cat "$out")"
else
  fail "pe-bench --fresh-cache 3 exited $?: $(cat "$err")"
fi
# ... and auto chooses each case's K (here: the rows of 512 tokens from memory).
if "$bench" --suite qknorm --tokens 512 --dtype bf16 --threads 1 --reps 3 --warmup 0 --fresh-cache auto >"$out" 2>"$err"; then
  grep -q '^--fresh-cache: each call of a serving row' "$out" || fail "--fresh-cache auto: no header line: $(cat "$out")"
  grep -q '^qwen3-8b prefill 1x512 *bf16 *[0-9]' "$out" || fail "--fresh-cache auto: no measured row: $(cat "$out")"
  echo "ok   pe-bench --suite qknorm --fresh-cache auto"
else
  fail "pe-bench --fresh-cache auto exited $?: $(cat "$err")"
fi

# --floor-data call: the floor's kernels over the call's rows, split among
# the threads as the call's are; every row still has its floor, and the
# header and the JSON say which data the floor walked.
if "$bench" --suite qknorm,kvquant --tokens 64 --threads 1,2 --reps 3 --warmup 0 --floor-data call >"$out" 2>"$err"; then
  grep -q 'floor = the row.s arithmetic on as many rows as the call has' "$out" \
    || fail "--floor-data call: the header does not say it: $(cat "$out")"
  echo "ok   pe-bench --floor-data call (table)"
else
  fail "pe-bench --floor-data call exited $?: $(cat "$err")"
fi
if "$bench" --suite qknorm --tokens 64 --threads 1,2 --reps 3 --warmup 0 --floor-data call --json >"$out" 2>"$err"; then
  python3 - "$out" <<'PY' || fail "--floor-data call --json: $(cat "$out")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["floor_data"] == "call", d["floor_data"]
rows = d["results"]
assert len(rows) == 4, len(rows)  # f32 and bf16, 1 and 2 threads
for r in rows:
    assert r["floor_ns_median"] > 0 and r["ratio_floor"] > 0, r
PY
  echo "ok   pe-bench --floor-data call --json: floor_data \"call\", every row with its floor"
else
  fail "pe-bench --floor-data call --json exited $?: $(cat "$err")"
fi

# The default table fits in 120 columns.
# shellcheck disable=SC2086
if "$bench" $quick --suite rope,kvquant >"$out" 2>"$err"; then
  w=$(awk '{ if (length($0) > m) m = length($0) } END { print m + 0 }' "$out")
  [ "$w" -le 120 ] || fail "the table is $w columns wide: $(cat "$out")"
  grep -q '^case  *dtype  *ns/call  *x stream bound' "$out" || fail "no table in: $(cat "$out")"
  echo "ok   the table is $w columns wide"
else
  fail "pe-bench $quick --suite rope,kvquant exited $?: $(cat "$err")"
fi
# ... and so does the mla suite's, every case of it.
if "$bench" --suite mla --threads 1 --reps 3 --warmup 0 >"$out" 2>"$err"; then
  w=$(awk '{ if (length($0) > m) m = length($0) } END { print m + 0 }' "$out")
  [ "$w" -le 120 ] || fail "the mla table is $w columns wide: $(cat "$out")"
  rows=$(grep -c -E '^(fp8 |fp8_ds )?(decode|prefill) ' "$out")
  [ "$rows" -eq 10 ] || fail "the mla table has $rows rows, not 10: $(cat "$out")"
  grep -q '^mla, 1 thread: 128q x192 rot64 gptj kv 512+64$' "$out" || fail "no mla block in: $(cat "$out")"
  echo "ok   the mla table is $w columns wide, $rows rows"
else
  fail "pe-bench --suite mla --threads 1 exited $?: $(cat "$err")"
fi

[ "$fails" -eq 0 ] || { echo "$fails checks failed"; exit 1; }
echo "all pe-bench argument checks passed"
