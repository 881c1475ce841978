#!/usr/bin/env bash
# Runs every benchmark in sequence: bash bench/run.sh [--quick] [--dsn DSN]
# Full run < 10 minutes on a 2-core machine; --quick < 60 s (CI). Numbers are printed, never asserted.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python}"
args=("$@")
started=$(date +%s)
echo "# mjsched benchmarks ($( [[ " ${args[*]-} " == *" --quick "* ]] && echo quick || echo full ))"
"$PY" -m bench.common machine "${args[@]}"
status=0
names=(throughput ceiling peers scaling latency records)
# idle (60 s), burst (100,000 jobs) and history (20 M old runs) only in a full run; tests/bench runs their quick forms
[[ " ${args[*]-} " == *" --quick "* ]] || names+=(idle burst history)
for name in "${names[@]}"; do
    t=$(date +%s)
    if ! "$PY" -m "bench.$name" "${args[@]}"; then
        echo "bench.$name FAILED" >&2
        status=1
    fi
    echo "(bench.$name: $(( $(date +%s) - t ))s)"
done
echo
echo "# all benchmarks: $(( $(date +%s) - started ))s"
exit $status
