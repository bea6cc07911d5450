#!/bin/sh
# check_pe_ab.sh PE_AB LIB - pe-ab on the library against itself: each call
# pattern loads it twice, finds the same bytes and prints the comparison;
# bad arguments stop with status 2 and a line naming them.
ab=$1
lib=$2
failed=0
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }
out=$(mktemp)
trap 'rm -f "$out"' EXIT

for args in "--case qknorm --dtype f32" "--case qknorm --dtype bf16 --tokens 1 --batch 3" \
            "--case store --layout bhtd --dtype f16" "--case rope --style gptj --dtype bf16" \
            "--kv fp8e4m3 --norm none --dtype bf16" "--kv q8_0 --dtype f16" "--kv fp8e5m2" \
            "--norm rms-token --kv-heads 32 --dtype bf16" "--norm rms-token --kv q8_0" \
            "--norm rms1 --kv-heads 16 --dtype bf16" "--norm l2 --heads 40 --style gptj" \
            "--case rope --evict 4" "--fresh-cache 3 --dtype bf16" "--case store --fresh-cache 2" \
            "--case mrope --dtype bf16 --tokens 40" "--case mrope --layout bhtd --no-q" \
            "--case store --no-q --dtype bf16"; do
  # shellcheck disable=SC2086
  if "$ab" --base "$lib" --new "$lib" --tokens 4 --samples 5 --same-bytes $args >"$out" 2>&1; then
    case "$args" in
      *--evict*) evicted=$(grep -c ', each call after an eviction$' "$out") ;;
      *--fresh-cache*) evicted=$(grep -c ', each call into the next of [23] cache parts$' "$out") ;;
      *) evicted=1 ;;
    esac
    if grep -q '^same bytes: yes$' "$out" && grep -q '^new/base: [0-9.]*, the median' "$out" &&
       [ "$evicted" -eq 1 ]; then
      echo "ok   pe-ab $args"
    else
      fail "pe-ab $args: $(cat "$out")"
    fi
  else
    fail "pe-ab $args exited $?: $(cat "$out")"
  fi
done

# Two paths of one build, paired: the scalar path against the one this CPU
# chooses writes the same bytes (every path is bit-identical), and the
# header names each side's path.
if "$ab" --base "$lib" --new "$lib" --base-isa scalar --tokens 4 --samples 5 --same-bytes \
     --case store --dtype bf16 >"$out" 2>&1 &&
   grep -q '^same bytes: yes$' "$out" && grep -q '; base [^ ]* (scalar), new ' "$out"; then
  echo "ok   pe-ab --base-isa scalar"
else
  fail "pe-ab --base-isa scalar: $(cat "$out")"
fi

bad() { # expected message, then the arguments
  want=$1
  shift
  "$ab" "$@" >"$out" 2>&1
  st=$?
  if [ $st -eq 2 ] && grep -qF -- "$want" "$out"; then
    echo "ok   pe-ab $* -> $(cat "$out")"
  else
    fail "pe-ab $*: status $st, $(cat "$out") (expected status 2 and: $want)"
  fi
}
bad 'give both --base LIB and --new LIB' --base "$lib"
bad 'cannot read /nonexistent.so' --base /nonexistent.so --new "$lib"
bad '--case expects qknorm, store, rope or mrope, got "mla"' --base "$lib" --new "$lib" --case mla
bad '--no-q shapes store, rope and mrope' --base "$lib" --new "$lib" --no-q
bad '--fresh-cache shapes the caches of qknorm and store (--case mrope)' --base "$lib" --new "$lib" --case mrope --fresh-cache 2
bad '--evict expects an integer in [1, 65536], got "0"' --base "$lib" --new "$lib" --evict 0
bad '--fresh-cache shapes the caches of qknorm and store (--case rope)' --base "$lib" --new "$lib" --case rope --fresh-cache 4
bad '--layout shapes store, rope and mrope' --base "$lib" --new "$lib" --layout bhtd
bad '--head-dim 127 is odd' --base "$lib" --new "$lib" --head-dim 127
bad '--tokens expects an integer in [1, 1048576], got "0"' --base "$lib" --new "$lib" --tokens 0
bad '--kv expects plain, fp8e4m3, fp8e5m2 or q8_0, got "fp4"' --base "$lib" --new "$lib" --kv fp4
bad '--norm expects rms, rms-token, rms1, l2 or none, got "L2"' --base "$lib" --new "$lib" --norm L2
bad '--kv and --norm shape qknorm only (--case store)' --base "$lib" --new "$lib" --case store --norm none
bad '--kv q8_0 needs --head-dim a multiple of 32' --base "$lib" --new "$lib" --kv q8_0 --head-dim 80
bad 'pe_force_isa: unknown ISA "avx9"' --base "$lib" --new "$lib" --new-isa avx9
bad 'has no pe_rope_params_init' --base /lib/x86_64-linux-gnu/libm.so.6 --new "$lib"

[ $failed -eq 0 ] && echo "all pe-ab checks passed" || { echo "$failed pe-ab checks failed"; exit 1; }
