#!/bin/sh
# pe-bench --hf-config FILE with a file that cannot be read or used: exactly
# one error line on stderr (the library's sentence for an unusable file),
# nothing on stdout, and a non-zero exit status.
# usage: check_bench_hf_config.sh PE_BENCH FILE NEEDLE
bench=$1 file=$2 needle=$3
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
"$bench" --hf-config "$file" >"$out" 2>"$err"
rc=$?
if [ "$rc" -eq 0 ]; then echo "pe-bench exited 0 for $file"; exit 1; fi
if [ -s "$out" ]; then echo "pe-bench wrote to stdout:"; cat "$out"; exit 1; fi
lines=$(wc -l <"$err")
if [ "$lines" -ne 1 ]; then echo "pe-bench wrote $lines lines to stderr:"; cat "$err"; exit 1; fi
if ! grep -q -- "$needle" "$err"; then echo "stderr lacks \"$needle\":"; cat "$err"; exit 1; fi
echo "exit $rc: $(cat "$err")"
