#!/usr/bin/env bash
# The README's test command, several times in a row, with every core kept busy by another process (issue 36: the
# suite must not depend on how fast the machine is). Prints each run's result and time; exits 1 if any run failed.
#
#   ./scripts/test_under_load.sh            # 3 runs beside one busy loop per core
#   RUNS=1 HOGS=4 ./scripts/test_under_load.sh -x   # other arguments go to scripts/test.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
runs=${RUNS:-3}
hogs=${HOGS:-$(nproc)}
logs=$(mktemp -d "${TMPDIR:-/tmp}/ctx-under-load.XXXXXX")
hog_pids=()
stop_hogs() { [[ ${#hog_pids[@]} -eq 0 ]] || kill "${hog_pids[@]}" 2>/dev/null || true; }
trap stop_hogs EXIT
for _ in $(seq "$hogs"); do
  python3 -c 'while True: pass' &
  hog_pids+=($!)
done
echo "$hogs busy loops running; logs in $logs"
failed=0
for n in $(seq "$runs"); do
  started=$(date +%s)
  if ./scripts/test.sh "$@" >"$logs/run-$n.log" 2>&1; then
    echo "run $n: passed in $(($(date +%s) - started)) s ($(grep -Eo '[0-9]+ passed' "$logs/run-$n.log" | tail -1))"
  else
    echo "run $n: FAILED after $(($(date +%s) - started)) s, see $logs/run-$n.log"
    grep -E '^(FAILED|ERROR) ' "$logs/run-$n.log" | head -20 || true
    failed=1
  fi
done
exit "$failed"
