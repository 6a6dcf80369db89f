#!/usr/bin/env bash
# Before/after under the same load: the runner benchmark of a base commit (its own worktree)
# and of this checkout, alternating, ROUNDS times, with the load average before each run.
#   bash benchmarks/before_after.sh [BASE_COMMIT] [ROUNDS] [-- benchmark args]
# e.g. bash benchmarks/before_after.sh 962aa4b 2 -- --concurrency 64 --waves 10
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
base="${1:-962aa4b}"; rounds="${2:-2}"
shift $(( $# >= 2 ? 2 : $# )); [ "${1:-}" = "--" ] && shift
args=("$@"); [ ${#args[@]} -eq 0 ] && args=(--concurrency 64 --waves 10)
wt="${TMPDIR:-/tmp}/qa-bench-base-$base"
[ -d "$wt" ] || git -C "$here" worktree add -q --detach "$wt" "$base"
for i in $(seq "$rounds"); do
  for tree in "$wt" "$here"; do
    echo "== $(basename "$tree") ($(git -C "$tree" rev-parse --short HEAD)), $(uptime | sed 's/.*load/load/')"
    (cd "$tree" && OMP_NUM_THREADS=1 python3 benchmarks/runner_throughput.py "${args[@]}" | tail -n +2)
  done
done
