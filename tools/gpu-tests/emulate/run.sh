#!/usr/bin/env bash
# Host emulation of the GPU derivative sums (no GPU needed): the real
# kernels of src/cuda/derivatives_kernels.cuh, compiled by g++ (C++20)
# against the shims in shim/ (one std::thread per CUDA thread, std::barrier
# for __syncthreads, static for __shared__), on plans made by the real
# src/prune.c (the bounds the device plan applies), checked against a
# double loop of derivatives.h's contract:
#   derivatives       every kernel, d = 1..40, both precisions, both storage
#                     forms of the Gaussian, splits, shards and visit lists
#   derivatives_plan  prune.c's plan for derivative sums against a port of
#                     the decision written here, and pruned sums within
#                     tolerance * s0 of the full ones
#   plan_refine       the device plan's per-query refinement (the real kernels of
#                     src/cuda/plan_refine_kernels.cuh on prune.c's box plans):
#                     refined lists within the box lists, every query's sum
#                     over them within tolerance of its full sum, never above
#   plan_grouped      the device's grouped plans (the real kernels of
#                     src/cuda/plan_grouped_kernels.cuh), of a block's box
#                     and of each query's point (ORed per group of 32, and
#                     counted): lists the same as prune.c's grouped plan,
#                     every query's sum within tolerance of its full sum,
#                     what each block skipped
#   plan_pays         prune.c's test of whether a few queries' plan can pay:
#                     never "no" where the exact plan skips more than 10%;
#                     the groups' share estimate (kde_prune_groups_local_share)
#                     from above, telling normal data from clusters
#   plan_gate         src/cuda/plan_gate.cu (real headers, the CUDA toolkit's
#                     for their types; nvcc's folder): one query block's
#                     decision whether a plan can pay, the same in any order
#                     of its rows
#   hilbert           the queries' order (src/cuda/hilbert.cuh) on whole grids,
#                     dim = 1..8: a permutation whose steps are to neighbours;
#                     at order.cu's widths, sampled cells the same way
#   unit_spread       the CUDA model's layout of units (src/unit_spread.c): every
#                     point placed once, a unit per part of one run, split
#                     runs' units within the layout's width
#   density           the density kernel (src/cuda/kernel_small.cuh) on
#                     anchored single-precision fits, d = 1 to 3, tight
#                     tiles on and off, against a double sum: both within
#                     single's rounding, the tight form (d = 2 and 3) within
#                     1.5x the difference form's error, leaving one out too
#   mean_shift        one mean-shift step near the modes of bench/derivatives.R's
#                     three clusters: its error at several tolerances, both
#                     precisions, next to kde_modes()' stopping tolerance
#   sums IN OUT       one problem's sums (derivatives.cu's steps on the host);
#                     test_blocks.R runs test-derivatives.R's CUDA blocks on it:
#                       R_LIBS=<CPU build> Rscript tools/gpu-tests/emulate/test_blocks.R
# Slow (minutes): it is for the logic, not the speed. `--build-only` after
# the name compiles without running.
#   bash tools/gpu-tests/emulate/run.sh [derivatives|derivatives_plan|plan_pays|plan_gate|plan_refine|plan_grouped|hilbert|unit_spread|density|mean_shift|sums] [args]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
build="$here/build"
mkdir -p "$build"
# the backend's headers, then the shims over the ones that need the device
cp "$root"/src/cuda/*.cuh "$build"/
cp "$here"/shim/* "$build"/
# the plan's C code (prune.c and what it calls) and the units' layout,
# compiled as C
for c in prune spatial threads unit_spread whiten; do
  gcc -std=gnu99 -O2 -fopenmp -w -I"$root/src" -I"$root/inst/include" \
    -c "$root/src/$c.c" -o "$build/$c.o"
done
which=${1:-derivatives}
if [ "$which" = density ]; then
  # the real kernel headers (accumulate.cuh, kernels.cuh, numeric.cuh), with
  # only the device's own pieces shimmed: cuda_runtime.h and warp.h, the
  # intrinsics and fp16 of shim-density/, the MUFU's exp2 asm replaced
  build="$here/build-density"
  mkdir -p "$build"
  cp "$root"/src/cuda/*.cuh "$build"/
  cp "$here"/shim/cuda_runtime.h "$here"/shim/warp.h "$here"/shim-density/* "$build"/
  sed -i 's|^#include <cuda_fp16.h>|#include "cuda_fp16.h"\n#include "intrinsics.h"|; s|asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));|y = emulated_ex2(x);|' \
    "$build/numeric.cuh"
  grep -q emulated_ex2 "$build/numeric.cuh" || { echo "run.sh: numeric.cuh's ex2 asm not found" >&2; exit 1; }
  # a block's __shared__ arrays, one per block (blocks run one at a time):
  # static, the dynamic ones (extern) density.cpp's
  sed -i 's|^#define __shared__$|#define __shared__ static|' "$build/cuda_runtime.h"
  sed -i 's|extern __shared__|extern|' "$build"/*.cuh
  grep -q '__shared__ static' "$build/cuda_runtime.h" || { echo "run.sh: the __shared__ shim not found" >&2; exit 1; }
fi
extra=()
if [ "$which" = plan_gate ]; then
  # the real model.cuh and plan.cuh (no shims), the toolkit's headers for
  # their CUDA types; a warp shuffle declared for plan.cuh's device code
  build="$here/build-gate"
  mkdir -p "$build"
  cp "$root"/src/cuda/*.cuh "$root"/src/cuda/*.h "$build"/
  nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  cuda_include=$(dirname "$(dirname "$nvcc")")/include
  if [ ! -f "$cuda_include/cuda_runtime.h" ]; then
    echo "plan gate: skipped (no CUDA toolkit headers at $cuda_include)"
    exit 0
  fi
  printf 'template <typename T> T __shfl_xor_sync(unsigned, T v, int) { return v; }\n' \
    > "$build/shuffle.h"
  g++ -std=c++17 -O2 -w -x c++ -include "$build/shuffle.h" -I"$build" -I"$cuda_include" \
    -I"$root/src" -I"$root/inst/include" -c "$root/src/cuda/plan_gate.cu" -o "$build/plan_gate.o"
  extra=(-include "$build/shuffle.h" -I"$cuda_include" "$build/plan_gate.o")
fi
objects="$here/build"
g++ -std=c++20 -O2 -fno-strict-aliasing -pthread -fopenmp -w -I"$build" -I"$root/src" \
  -I"$root/inst/include" "$here/$which.cpp" "${extra[@]}" "$objects"/prune.o "$objects"/spatial.o \
  "$objects"/threads.o "$objects"/unit_spread.o "$objects"/whiten.o -o "$build/$which"
[ "${2:-}" = "--build-only" ] && exit 0
"$build/$which" "${@:2}"
