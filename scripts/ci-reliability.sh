#!/usr/bin/env bash
# Reliability checks of libposenc, each step ending in one summary line with
# its figure:
#   1. every reproducer in tests/fuzz/repro run once through its target, then
#      every libFuzzer target for FUZZ_SECONDS (default 20) s each: all of
#      tests/fuzz/fuzz_*.c (16 targets, 5 to 6 minutes)
#   2. the whole test suite under ASan+UBSan (gcc), and the kernel tests
#      again built with clang (its UBSan checks a null pointer offset by 0)
#   3. the thread tests under TSan (clang)
#   4. the test suite under valgrind memcheck (zero errors, zero definite leaks)
#   5. abidiff against the committed ABI baseline
# Exits non-zero if any step fails; later steps still run so one run shows
# everything. Build directories: build-rel-*.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
FUZZ_SECONDS=${FUZZ_SECONDS:-20}
# STEPS picks a subset, e.g. STEPS="valgrind abi" (default: all five).
STEPS=${STEPS:-fuzz asan tsan valgrind abi}
want() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
t0=$(date +%s)
failed=()
summary=()
say() { summary+=("$*"); echo "$*"; }
step() { echo; echo "=== reliability: $* ($(( $(date +%s) - t0 )) s) ==="; }

scripts/install-deps.sh build reliability || { echo "install-deps failed"; exit 1; }

configure() { # dir, cmake args...
  local dir=$1; shift
  cmake -S . -B "$dir" -DPE_BUILD_BENCH=OFF -DPE_WERROR=ON "$@" > "$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log"; return 1; }
}

# ---- 1. fuzzing --------------------------------------------------------------
if want fuzz; then
step "fuzzing, ${FUZZ_SECONDS} s per target"
fdir=build-rel-fuzz
mkdir -p "$fdir"
if configure "$fdir" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
     -DPE_BUILD_FUZZ=ON -DPE_SANITIZE=address,undefined &&
   targets=$(grep -v '^$' "$fdir/tests/fuzz/fuzz_targets.txt") &&
   cmake --build "$fdir" -j"$JOBS" --target $targets > "$fdir/build.log" 2>&1; then
  # The reproducers of past findings (tests/fuzz/repro/<target>-<what>), each
  # run once through its target before any fuzzing: a finding that comes back
  # fails here by name, whatever the fuzzer's luck in 20 s.
  nrepro=0
  for r in tests/fuzz/repro/*; do
    [ -f "$r" ] || continue
    t=${r##*/}; t=${t%%-*}
    nrepro=$((nrepro + 1))
    if ! ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1 \
         UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
         "$fdir/tests/fuzz/$t" "$r" > "$fdir/repro.log" 2>&1; then
      grep -E "VIOLATION|ERROR|runtime error|SUMMARY" "$fdir/repro.log" | head -8
      say "fuzz repro $r: FAILED (or no target $t)"
      failed+=("fuzz repro ${r##*/}")
    fi
  done
  say "fuzz reproducers: $nrepro replayed from tests/fuzz/repro"
  total_execs=0
  for t in $targets; do
    corpus="$fdir/corpus/$t"
    mkdir -p "$corpus" "$fdir/artifacts"
    seeds="tests/fuzz/corpus/$t"
    [ -d "$seeds" ] || seeds=""
    dict=""
    [ -f "tests/fuzz/$t.dict" ] && dict="-dict=tests/fuzz/$t.dict"
    log="$fdir/$t.log"
    # allocator_may_return_null: a table too large for memory must come back
    # as PE_ERR_OUT_OF_MEMORY, not as an ASan report.
    ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      "$fdir/tests/fuzz/$t" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -timeout=20 \
        -print_final_stats=1 -artifact_prefix="$fdir/artifacts/$t-" $dict \
        "$corpus" $seeds > "$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    execs=${execs:-0}
    total_execs=$((total_execs + execs))
    if [ $rc -eq 0 ]; then
      say "fuzz $t: $execs execs in $FUZZ_SECONDS s, 0 crashes"
    else
      grep -E "VIOLATION|ERROR|runtime error|SUMMARY|Test unit written" "$log" | head -8
      say "fuzz $t: $execs execs in $FUZZ_SECONDS s, 1 crash (stopped; see $log and $fdir/artifacts)"
      failed+=("fuzz $t")
    fi
  done
  say "fuzz total: $total_execs execs over $(echo $targets | wc -w) targets"
else
  tail -30 "$fdir/build.log" 2>/dev/null
  say "fuzz: BUILD FAILED"
  failed+=("fuzz build")
fi

fi

# ---- 2. ASan + UBSan -----------------------------------------------------------
if want asan; then
# gcc, not clang: clang 14 has no _Float16 on x86-64 and the reference tests
# use it; and gcc links its sanitizer runtimes into libposenc.so, which is
# linked with --no-undefined (clang leaves them to the executable).
step "test suite under ASan+UBSan"
adir=build-rel-asan
mkdir -p "$adir"
if configure "$adir" -DCMAKE_C_COMPILER=gcc -DCMAKE_BUILD_TYPE=RelWithDebInfo \
     -DPE_SANITIZE=address,undefined &&
   cmake --build "$adir" -j"$JOBS" > "$adir/build.log" 2>&1; then
  (cd "$adir" && ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
     UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
     ctest -V -j"$JOBS" -E exported_symbols) > "$adir/ctest.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then
    grep -E "Failed|\*\*\*|ERROR|runtime error|SUMMARY" "$adir/ctest.log" | head -20
    failed+=("asan+ubsan")
  fi
  line=$(grep -E "tests passed" "$adir/ctest.log" | tail -1)
  say "asan+ubsan: ${line:-no tests ran}"
else
  tail -30 "$adir/build.log"; say "asan+ubsan: BUILD FAILED"; failed+=("asan build")
fi
# clang's UBSan checks what gcc's does not - a null pointer offset by zero
# (an unweighted norm's weights, which the fuzzers found in a kernel once) -
# so the kernel tests, every vector path this CPU runs against the scalar
# one (the suite above runs only the CPU's default path's), run built with
# clang too.
cdir=build-rel-asan-clang
mkdir -p "$cdir"
if configure "$cdir" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
     -DPE_SANITIZE=address,undefined &&
   cmake --build "$cdir" -j"$JOBS" --target test_internal_kernels > "$cdir/build.log" 2>&1; then
  if ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
       "$cdir/tests/test_internal_kernels" > "$cdir/test.log" 2>&1; then
    say "asan+ubsan (clang): test_internal_kernels passed"
  else
    grep -E "runtime error|SUMMARY|FAILED" "$cdir/test.log" | head -10
    say "asan+ubsan (clang): test_internal_kernels FAILED"
    failed+=("asan+ubsan clang kernels")
  fi
else
  tail -30 "$cdir/build.log"; say "asan+ubsan (clang): BUILD FAILED"; failed+=("asan clang build")
fi

fi

# ---- 3. TSan on the thread tests ----------------------------------------------
if want tsan; then
step "thread tests under TSan"
tdir=build-rel-tsan
mkdir -p "$tdir"
tsan_tests=$(cd tests && ls test_threadpool.c test_concurrency.c 2>/dev/null | sed 's/\.c$//')
# gcc for the same reasons as above; clang 14's shared TSan runtime (needed
# for the same --no-undefined reason) also crashes in its own start-up.
if configure "$tdir" -DCMAKE_C_COMPILER=gcc -DCMAKE_BUILD_TYPE=RelWithDebInfo \
     -DPE_SANITIZE=thread &&
   cmake --build "$tdir" -j"$JOBS" --target $tsan_tests > "$tdir/build.log" 2>&1; then
  n=0; bad=0
  for t in $tsan_tests; do
    n=$((n + 1))
    # Kernels with high-entropy mmap randomisation break TSan's fixed shadow
    # layout ("unexpected memory mapping"): run without ASLR.
    if ! TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" CMOCKA_MESSAGE_OUTPUT=stdout \
         setarch "$(uname -m)" -R "$tdir/tests/$t" > "$tdir/$t.log" 2>&1; then
      bad=$((bad + 1)); grep -E "WARNING|ERROR|FAILED|SUMMARY" "$tdir/$t.log" | head -10
      failed+=("tsan $t")
    fi
  done
  say "tsan: $((n - bad))/$n thread tests clean ($(echo $tsan_tests))"
else
  tail -30 "$tdir/build.log"; say "tsan: BUILD FAILED"; failed+=("tsan build")
fi

fi

# ---- 4. valgrind memcheck -----------------------------------------------------
if want valgrind; then
step "test suite under valgrind memcheck"
vdir=build-rel-valgrind
mkdir -p "$vdir"
# -O2 -g: memcheck needs the debug info, not -O0 (which some intrinsics
# code does not compile at).
if configure "$vdir" -DCMAKE_C_COMPILER=gcc -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
   cmake --build "$vdir" -j"$JOBS" > "$vdir/build.log" 2>&1; then
  # test_isa compares every ISA path bit for bit over many random inputs:
  # valgrind cannot execute AVX-512 (it hides it from cpuid), so under it the
  # test is hours of repeated emulated runs. ASan+UBSan run it in full.
  vg_skip="test_isa"
  vg_one() { # one test program under memcheck; its logs are read afterwards
    local exe=$1 t log
    t=$(basename "$exe")
    log="$vdir/$t.valgrind.log"
    # hwloc reads /sys and sleef probes the CPU: one-time internal
    # allocations of system libraries are listed, with reasons, in the
    # suppressions file; libposenc's own code is never suppressed.
    CMOCKA_MESSAGE_OUTPUT=stdout timeout 900 \
      valgrind --tool=memcheck --error-exitcode=99 --leak-check=full \
        --errors-for-leak-kinds=definite --show-leak-kinds=definite \
        --suppressions=scripts/valgrind.supp --log-file="$log" "$exe" > "$vdir/$t.out" 2>&1
    echo $? > "$vdir/$t.rc"
  }
  export -f vg_one
  export vdir
  progs=()
  for exe in "$vdir"/tests/test_*; do
    [ -x "$exe" ] || continue
    case " $vg_skip " in *" $(basename "$exe") "*) continue ;; esac
    progs+=("$exe")
  done
  rm -f "$vdir"/*.rc
  printf '%s\n' "${progs[@]}" | xargs -P "$JOBS" -I{} bash -c 'vg_one "$1"' _ {}
  n=0; errs=0; defl=0; bad=0
  for exe in "${progs[@]}"; do
    t=$(basename "$exe")
    n=$((n + 1))
    log="$vdir/$t.valgrind.log"
    rc=$(cat "$vdir/$t.rc" 2>/dev/null || echo 1)
    e=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) errors.*/\1/p' "$log" | tail -1)
    d=$(sed -n 's/.*definitely lost: \([0-9,]*\) bytes.*/\1/p' "$log" | tail -1 | tr -d ,)
    errs=$((errs + ${e:-0})); defl=$((defl + ${d:-0}))
    if [ "$rc" -ne 0 ]; then
      bad=$((bad + 1)); failed+=("valgrind $t")
      echo "valgrind $t: exit $rc (124 = timed out)"
      grep -E "Invalid|uninitialised|definitely|FAILED" "$log" "$vdir/$t.out" | head -10
    fi
  done
  say "valgrind: $n test programs, $errs errors, $defl bytes definitely lost, $bad failed (skipped: $vg_skip)"
else
  tail -30 "$vdir/build.log"; say "valgrind: BUILD FAILED"; failed+=("valgrind build")
fi

fi

# ---- figures printed by the tests themselves ------------------------------------
# From the valgrind run when there is one (UBSan stops a test at its first
# report, memcheck lets it finish), else from the ASan+UBSan log.
if want valgrind || want asan; then
  if want valgrind; then src=("$vdir"/*.out); run="valgrind run"; else src=("$adir/ctest.log"); run="ASan run"; fi
  faults=$(cat "${src[@]}" 2>/dev/null | grep -o "faults injected: [0-9]*" | awk '{s+=$3} END {print s+0}')
  badin=$(cat "${src[@]}" 2>/dev/null | grep -o "bad inputs tried: [0-9]*" | awk '{s+=$4} END {print s+0}')
  say "faults injected: $faults allocation failures, each PE_ERR_OUT_OF_MEMORY, no leak ($run)"
  say "bad inputs tried: $badin edge-case calls refused with nothing written ($run; plus every fuzz exec)"
fi

# ---- 5. ABI --------------------------------------------------------------------
if want abi; then
step "ABI against abi/libposenc.abi"
# The valgrind build is -O2 -g: reuse its library; otherwise abi-check builds one.
vlib=""
want valgrind && [ -f "$vdir/libposenc.so" ] && vlib="$vdir/libposenc.so"
if out=$(scripts/abi-check.sh $vlib 2>&1); then
  say "$(echo "$out" | tail -1)"
else
  echo "$out" | tail -40; say "$(echo "$out" | tail -1)"; failed+=("abi")
fi
fi

step "summary"
for s in "${summary[@]}"; do echo "  $s"; done
echo "  wall time: $(( $(date +%s) - t0 )) s"
if [ ${#failed[@]} -ne 0 ]; then
  echo "reliability: FAILED: ${failed[*]}"
  exit 1
fi
echo "reliability: all green"
