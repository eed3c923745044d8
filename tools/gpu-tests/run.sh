#!/usr/bin/env bash
# The CUDA backend's checks that live outside testthat, one runner.
#
#   bash tools/gpu-tests/run.sh host    no GPU needed (CI runs it, `make
#                                       gpu-host-checks`): the derivative kernels
#                                       and their pruning plan, emulated on the host
#   bash tools/gpu-tests/run.sh device  on a GPU machine, the package installed:
#                                       the harness's correctness and plan modes,
#                                       then check_gpuderiv.R and check_adaptive_gpu.R
#
# Each check prints one line, a failed one ending in "FAIL"; the runner exits
# non-zero when any failed, and with KDEGPU_TEST_COUNTS set appends
# "passed failed skipped" to that file (as the testthat runs do).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root" || exit 2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
mode=${1:-host}
status=0

run() { # name, command...: the command's output, kept for the count
  local name=$1; shift
  echo "== gpu-tests: $name"
  "$@" 2>&1 | tee -a "$log"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || { echo "== gpu-tests: $name exited $rc"; status=1; }
}

case "$mode" in
  host)
    # The Gaussian in every storage form and both precisions, d = 1 to 40,
    # splits, shards and visit lists; the plan's decisions against a host
    # port of prune.c's. (The compact kernels' float sums near their cusps
    # and support edges are outside the emulator's 1e-4: see README.md.)
    bash tools/gpu-tests/emulate/run.sh derivatives --build-only || status=1
    run "derivative kernels, gaussian" tools/gpu-tests/emulate/build/derivatives 0
    run "derivative kernels, every kernel in double" tools/gpu-tests/emulate/build/derivatives -1 double
    run "derivative plan" bash tools/gpu-tests/emulate/run.sh derivatives_plan
    run "whether a plan can pay" bash tools/gpu-tests/emulate/run.sh plan_pays
    run "one query block's plan decision in any row order" bash tools/gpu-tests/emulate/run.sh plan_gate
    run "the plan refined per query" bash tools/gpu-tests/emulate/run.sh plan_refine
    run "the plan from the units' groups" bash tools/gpu-tests/emulate/run.sh plan_grouped
    run "the queries' Hilbert order" bash tools/gpu-tests/emulate/run.sh hilbert
    run "the units' layout" bash tools/gpu-tests/emulate/run.sh unit_spread
    run "the density kernel's tight tiles" bash tools/gpu-tests/emulate/run.sh density
    checks=$(grep -cE ' (float|visited|refined|grouped|layout|tight|grids|orders) ' "$log")
    ;;
  device)
    run "harness (correctness)" env SANITIZE=0 PROFILE=0 MODE=test bash tools/gpu-tests/harness/run.sh
    run "harness (device plan)" env SANITIZE=0 PROFILE=0 MODE=plan bash tools/gpu-tests/harness/run.sh
    run "derivative sums from R" Rscript tools/gpu-tests/check_gpuderiv.R
    run "adaptive fits from R" Rscript tools/gpu-tests/check_adaptive_gpu.R
    checks=$(grep -cE '(ok|FAIL|PASS)$' "$log")
    ;;
  *) echo "usage: bash tools/gpu-tests/run.sh host|device" >&2; exit 2 ;;
esac

failed=$(grep -c 'FAIL' "$log")
[ "$failed" -gt 0 ] && status=1
[ "$status" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1
passed=$((checks > failed ? checks - failed : 0))
echo "gpu-tests $mode: $passed passed, $failed failed"
[ -n "${KDEGPU_TEST_COUNTS:-}" ] && echo "$passed $failed 0" >> "$KDEGPU_TEST_COUNTS"
exit "$status"
