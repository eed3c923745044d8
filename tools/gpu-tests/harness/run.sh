#!/bin/bash
# Build and run the CUDA backend harness (no R needed).
#
#   bash tools/gpu-tests/harness/run.sh build   compile tools/gpu-tests/harness/build/harness (+ ptxas report)
#   bash tools/gpu-tests/harness/run.sh         build if missing, then on the GPU machine:
#                                  harness all, compute-sanitizer memcheck
#                                  (quick subset) and racecheck (tiny), ncu on
#                                  three shapes, SASS summary of the hot
#                                  kernel; logs (7 files) in $OUT (default
#                                  tools/gpu-tests/harness/out)
#   MODE=test|bench|quick ...      run that harness mode instead of "all";
#   SANITIZE=0, PROFILE=0          skip compute-sanitizer / ncu
#
# The harness binary can be built here (nvcc, no GPU needed) and carried to
# the GPU machine: the run tool's carry=["tools/gpu-tests/harness/build"] (git-ignored via
# .git/info/exclude).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${OUT:-$here/out}
mkdir -p "$out" "$here/build"
NVCC=${NVCC:-nvcc}
command -v "$NVCC" >/dev/null 2>&1 || NVCC=/usr/local/cuda/bin/nvcc
ARCH=${ARCH:-sm_90}
bin=$here/build/harness
flags="-O3 -std=c++17 -arch=$ARCH -I$root/inst/include -I$root/src"

# The backend's sources (src/cuda/*.cu) and their objects in build/, one per
# source; and the package's host C sources that they call (the k-d order, the units' layout,
# the boxes, the pruning proof, the whitening, the thread count, the
# moment-sum bookkeeping, the model's column means).
sources() { ls "$root"/src/cuda/*.cu 2>/dev/null; }
objects() { for f in $(sources); do printf '%s\n' "$here/build/$(basename "${f%.cu}").o"; done; }
host_sources="cdf data_summary moments prune spatial threads unit_spread whiten"
host_objects() { for f in $host_sources; do printf '%s\n' "$here/build/host_$f.o"; done; }
CC=${CC:-cc}

build() {
  # the backend's objects in parallel (BUILD_JOBS, default the cores), each
  # with its ptxas report, gathered in build/ptxas.txt
  export NVCC flags here
  sources | xargs -P "${BUILD_JOBS:-$(nproc)}" -I{} sh -c \
    '"$NVCC" $flags -Xptxas -v -c "$1" -o "$here/build/$(basename "${1%.cu}").o" \
       2> "$here/build/$(basename "${1%.cu}").ptxas"' _ {} || {
    cat "$here"/build/*.ptxas; return 1; }
  cat "$here"/build/*.ptxas > "$here/build/ptxas.txt"
  for f in $host_sources; do
    "$CC" -O2 -fopenmp -std=gnu11 -I"$root/inst/include" -I"$root/src" \
      -c "$root/src/$f.c" -o "$here/build/host_$f.o" || return 1
  done
  "$NVCC" $flags "$here"/harness*.cu $(objects) $(host_objects) -Xcompiler -fopenmp -o "$bin"
}

if [ "${1:-}" = build ]; then build; exit $?; fi
[ -x "$bin" ] || build || exit 1
PATH=$PATH:/usr/local/cuda/bin
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv 2>&1
# SM clock and power while the harness runs (this background job is ours)
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,utilization.gpu \
  --format=csv -lms 1000 > "$out/clocks.csv" 2>&1 &
smi_pid=$!
"$bin" ${MODE:-all} 2>&1 | tee "$out/harness.log"
status=${PIPESTATUS[0]}
kill "$smi_pid" 2>/dev/null
if [ "${MODE:-all}" = bound ] && command -v cuobjdump >/dev/null; then
  # each bound kernel's instructions a pair, for the issue slots' limit
  cuobjdump -sass "$bin" > "$out/sass_harness.txt" 2>&1
  awk -f "$here/bound_sass.awk" "$out/sass_harness.txt" > "$out/bound-sass.csv"
  echo "bound kernels' SASS counted: $(($(wc -l < "$out/bound-sass.csv") - 1))"
  gzip -f "$out/sass_harness.txt"
fi
echo "SM clock under load (MHz): $(awk -F', ' 'NR>1 && $5+0 > 50 {print $2+0}' "$out/clocks.csv" | sort -n | uniq -c | sort -rn | head -3 | tr '\n' ' ')"
if [ "${PROFILE:-1}" = 1 ] && command -v ncu >/dev/null; then
  # hardware counters for one evaluation of three shapes (clocks left alone)
  timeout 300 ncu --clock-control none -k regex:'kde_(small|tc_small|tc_wide|merge)' \
    --section SpeedOfLight --section ComputeWorkloadAnalysis \
    --section WarpStateStats --section Occupancy --section LaunchStats \
    "$bin" profile > "$out/ncu.txt" 2>&1
  echo "ncu rc=$?"
  grep -E '^  [a-z_]+.*kde_|SM Frequency|Duration|Compute \(SM\) Throughput|Issue Slots Busy|Executed Ipc Active|Achieved Occupancy|Registers Per|Block Limit|Warp Cycles Per Issued|Theoretical Occupancy' "$out/ncu.txt" | head -80
fi
if [ "${SANITIZE:-1}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  timeout 240 compute-sanitizer --tool memcheck --leak-check full "$bin" quick \
    > "$out/memcheck.log" 2>&1
  echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY|LEAK SUMMARY' "$out/memcheck.log" | tr '\n' ' ')"
  timeout 120 compute-sanitizer --tool racecheck "$bin" tiny > "$out/racecheck.log" 2>&1
  echo "racecheck rc=$?: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$out/racecheck.log" | tr '\n' ' ')"
fi
if command -v cuobjdump >/dev/null; then
  for o in $(objects); do cuobjdump -sass "$o"; done > "$out/sass_all.txt" 2>&1
  # the single-precision Gaussian d = 3 kernel: its instruction mix
  awk '/Function : .*kde_small_kernelILi0EfLi3E/{p=1} /Function : /&&!/kde_small_kernelILi0EfLi3E/{p=0} p' \
    "$out/sass_all.txt" > "$out/sass_gauss_f3.txt"
  echo "gaussian float d=3 SASS mix:"
  grep -oE '^\s+/\*[0-9a-f]+\*/\s+[A-Z0-9_.]+' "$out/sass_gauss_f3.txt" | awk '{print $2}' \
    | sed 's/\..*//' | sort | uniq -c | sort -rn | head -15
  grep -c 'MUFU.EX2' "$out/sass_gauss_f3.txt" | sed 's/^/MUFU.EX2 count: /'
  gzip -f "$out/sass_all.txt"
fi
exit $status
