#!/usr/bin/env bash
# scripts/fuzz.sh BUILD_DIR SECONDS [TARGET...]: runs each libFuzzer target of tests/fuzz for
# SECONDS (all targets when none are named), one after the other, on a working copy of its
# committed corpus. Prints executions, coverage and findings per target; exits 1 on a finding.
# A finding is in BUILD_DIR/findings/TARGET/: fix it, then commit the input into
# tests/fuzz/corpus/TARGET/ (named after the bug), where CTest replays it from then on.
set -uo pipefail
build=$1
seconds=$2
shift 2
targets=("$@")
if ((${#targets[@]} == 0)); then
  targets=(pt_file state_dict model_dir weights gettext corpus_files tokenizers metrics server_api)
fi
root=$(cd "$(dirname "$0")/.." && pwd)
export LSAN_OPTIONS=suppressions=$root/tests/fuzz/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1
status=0
printf '%-14s %8s %8s %12s %8s %8s %s\n' target seconds cpu_s executions cov features findings
for t in "${targets[@]}"; do
  work=$build/fuzz-corpus/$t
  findings=$build/findings/$t
  mkdir -p "$work" "$findings"
  log=$build/findings/$t.log
  # The working corpus keeps what earlier runs found; the committed seeds are read, never written.
  /usr/bin/time -f 'cpu_seconds %U %S' -o "$log.time" \
    "$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -print_final_stats=1 -timeout=20 \
    -rss_limit_mb=4096 -artifact_prefix="$findings/" "$work" "$root/tests/fuzz/corpus/$t" \
    >"$log" 2>&1
  rc=$?
  cpu=$(awk '/cpu_seconds/ {printf "%.0f", $2 + $3}' "$log.time")
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*')
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*')
  found=$(find "$findings" -maxdepth 1 -type f | wc -l)
  printf '%-14s %8s %8s %12s %8s %8s %s\n' "$t" "$seconds" "${cpu:-?}" "${execs:-?}" "${cov:-?}" \
    "${ft:-?}" "$found"
  if ((rc != 0 || found > 0)); then
    status=1
    echo "  $t: exit $rc; see $log" >&2
  fi
done
exit $status
