#!/usr/bin/env bash
# One call's work on the lent GPU machine (no R there; see
# ../shared/device/README.md): unpack the R bundle carried in .gpu/, install
# the package for the GPU that is there, then run what STEPS lists, each
# logged to <step>.log, with one summary line per step at the end. $OUT
# gets three files (the device tool returns at most eight): summary.txt,
# gpu.csv (bench) and logs.tar.gz with every log.
#
#   KDEGPU_COMMIT=$(git rev-parse --short=12 HEAD) STEPS="tests harness bench" \
#     bash tools/gpu-session.sh
#
# Steps: tests (the testthat suite, CUDA backend; TEST_FILTER picks files,
# e.g. "cuda|sample"), constrained (the same under a 16 MiB GPU budget on
# two replicas of GPU 0, KDEGPU_TEST_* in tests/testthat/helper-backends.R),
# multi (bench/gpu_multi.R on a machine with two GPUs,
# to $OUT/gpu-multi.csv), harness (the CUDA
# harness's correctness mode), plan (its device-plan mode against prune.c),
# ceiling (the harness's ceiling mode: issue 32's kernel rows, each form's
# pairs per second at tolerance 0 with the SM clock and the exp unit's limit
# at that clock, to $OUT/ceiling.csv), bound (the harness's bound mode: each
# pair's arithmetic alone, with a share of the exp2s as a polynomial, to
# $OUT/bound.csv),
# bench (bench/gpu.R, written to $OUT/gpu.csv), prune (bench/prune.R, to
# $OUT/prune.csv), derivatives and bandwidth (bench/<step>.R, to
# $OUT/<step>.csv), large (bench/prune_large.R: issue 15's n = 1e7 and 1e8
# shapes, to $OUT/prune-large.csv; KDEGPU_LARGE picks rows), cdf
# (bench/cdf.R, to $OUT/cdf.csv), single (bench/single_precision.R: the
# Gaussian's path and single against double, to $OUT/single-precision.csv),
# sums (bench/single_large_sums.R: single against double at n = 1e8),
# shapes (bench/shapes.R: few, sparse and clustered queries, GPS-like data,
# default against tolerance = 0, to $OUT/shapes.csv), fit (bench/fit.R:
# kde_gpu() itself at n = 1e6 to 1e8, to $OUT/fit.csv),
# adaptive (tools/gpu-tests/check_adaptive_gpu.R: adaptive fits, cuda vs cpu, and
# timings), gpuderiv (tools/gpu-tests/check_gpuderiv.R: the derivative
# sums' tests, cuda vs cpu, kde_modes and timings), sanitize
# (compute-sanitizer memcheck on a short R workload), mixed (bench/mixed.R: mixed
# data's cv.ml, MIXED_SIZES, to $OUT/mixed.csv), inference (bench/inference.R:
# kde_test, conditional densities and quantiles, kde_classifier at n = 1e6,
# to $OUT/inference.csv).
set -uo pipefail
final=${OUT:-/tmp/kdegpu-out}
out=$(mktemp -d)
mkdir -p "$final"
finish() {
  printf '%s\n' "${summary[@]}" > "$out/summary.txt"
  cp "$out/summary.txt" "$final/" 2>/dev/null
  [ -f "$out/gpu.csv" ] && cp "$out/gpu.csv" "$final/"
  for csv in prune prune-large cdf derivatives bandwidth gpu-multi single-precision shapes fit mixed ceiling bound inference; do
    [ -f "$out/$csv.csv" ] && cp "$out/$csv.csv" "$final/"
  done
  tar czf "$final/logs.tar.gz" -C "$out" . 2>/dev/null
  cat "$out/summary.txt"
}
trap finish EXIT
step() {
  local name=$1; shift
  local t0=$SECONDS
  # STEP_TIMEOUT (seconds, per step) keeps one slow step from eating the
  # device call's limit, so that the logs of the others still come back.
  timeout "${STEP_TIMEOUT:-3000}" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  summary+=("$name: rc=$rc, $((SECONDS - t0)) s; $(tail -n 1 "$out/$name.log")")
  return $rc
}

summary=()
# A warm machine keeps R and the package from the call before: unpack and
# install only when they are not there (REINSTALL=1 forces the install).
# NO_R=1: neither, for steps that need no R (harness, ceiling, plan).
export CUDA_ARCH=${CUDA_ARCH:-90} MAKEFLAGS=${MAKEFLAGS:--j8}
if [ -z "${NO_R:-}" ]; then
  if ! command -v Rscript >/dev/null 2>&1; then
    bash .gpu/unpack-r-bundle.sh .gpu/rbundle.tar.xz > "$out/unpack.log" 2>&1 || { cat "$out/unpack.log"; exit 1; }
  fi
  if [ -n "${REINSTALL:-}" ] || ! Rscript -e 'library(kdegpu)' >/dev/null 2>&1; then
    step install R CMD INSTALL . || { tail -n 40 "$out/install.log"; exit 1; }
  fi
fi
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$out/gpu.txt" 2>&1

run_tests='filter <- Sys.getenv("TEST_FILTER"); if (!nzchar(filter)) filter <- NULL
  res <- as.data.frame(testthat::test_local(".", load_package = "installed", filter = filter,
  reporter = testthat::SummaryReporter$new(show_praise = FALSE), stop_on_failure = FALSE));
  cat(sprintf("%d passed, %d failed, %d skipped\n", sum(res$passed),
      sum(res$failed) + sum(res$error), sum(res$skipped)))'
for s in ${STEPS-tests harness bench}; do # STEPS="" runs none
  case "$s" in
    tests)
      step tests Rscript -e "$run_tests" ;;
    constrained) # the suite again under a 16 MiB budget on two replicas of GPU 0
      step constrained env KDEGPU_TEST_GPU_MEMORY=16777216 KDEGPU_TEST_DEVICES=0,0 \
        Rscript -e "$run_tests" ;;
    harness)
      step harness env SANITIZE=0 PROFILE=0 MODE=test OUT="$out/harness" bash tools/gpu-tests/harness/run.sh ;;
    ceiling) # issue 32's kernel rows, with the SM clock they ran at
      step ceiling env SANITIZE=0 PROFILE=0 MODE=ceiling CEILING_CSV="$out/ceiling-rows.csv" \
        OUT="$out/harness-ceiling" bash tools/gpu-tests/harness/run.sh
      clock=$(awk -F', ' 'NR>1 && $5+0 > 50 {print $2+0}' "$out/harness-ceiling/clocks.csv" \
        | sort -n | uniq -c | sort -rn | awk 'NR==1 {print $2}')
      card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
      sms=$(grep -o '[0-9]* SMs' "$out/harness-ceiling/harness.log" | head -n 1 | cut -d' ' -f1)
      awk -v card="$card" -v clock="${clock:-NA}" -v sms="${sms:-132}" -v date="$(date -u +%F)" \
        -v commit="${KDEGPU_COMMIT:-unknown}" 'BEGIN {FS = OFS = ","}
        NR == 1 {print $0, "device", "sm_clock_mhz", "exp_limit", "share_of_limit", "date", "commit"; next}
        { limit = sms * 16 * clock * 1e6; share = clock == "NA" ? "NA" : sprintf("%.3f", $8 / limit)
          print $0, "\"" card "\"", clock, sprintf("%.3e", limit), share, date, commit }' \
        "$out/ceiling-rows.csv" > "$out/ceiling.csv" ;;
    bound) # what the pair's arithmetic alone reaches (its clock measured in the kernel)
      step bound env SANITIZE=0 PROFILE=0 MODE=bound BOUND_CSV="$out/bound-rows.csv" \
        OUT="$out/harness-bound" bash tools/gpu-tests/harness/run.sh
      # with each kernel's instructions a pair (its SASS) and the limit they
      # set at the row's clock: the issue slots' (4 warp instructions a clock
      # an SM) or the exp unit's for the 32 - P of 32 exp2s it takes
      card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
      sms=$(grep -o '[0-9]* SMs' "$out/harness-bound/harness.log" | head -n 1 | cut -d' ' -f1)
      touch "$out/harness-bound/bound-sass.csv"
      awk -v card="$card" -v sms="${sms:-132}" -v date="$(date -u +%F)" \
        -v commit="${KDEGPU_COMMIT:-unknown}" 'BEGIN {FS = OFS = ","}
        FILENAME == ARGV[1] {ipp[$1 FS $2 FS $3 FS $4 FS $5] = $8; next}
        FNR == 1 {print $0, "instructions_per_pair", "issue_limit", "share_of_issue_limit",
                  "device", "date", "commit"; next}
        { i = ipp[$1 FS $2 FS $3 FS $4 FS $5]; lim = "NA"; share = "NA"
          if (i != "" && i > 0) {
            lim = sms * 4 * 32 * $7 * 1e6 / i
            if ($8 * 32 / (32 - $5) < lim) lim = $8 * 32 / (32 - $5)
            share = sprintf("%.3f", $6 / lim); lim = sprintf("%.4e", lim)
          } else i = "NA"
          print $0, i, lim, share, "\"" card "\"", date, commit }' \
        "$out/harness-bound/bound-sass.csv" "$out/bound-rows.csv" > "$out/bound.csv" ;;
    bench)
      step bench env KDEGPU_BENCH_DERIVATIVES=0 Rscript bench/gpu.R "$out/gpu.csv" ;; # see derivatives
    plan)
      step plan env SANITIZE=0 PROFILE=0 MODE=plan OUT="$out/harness-plan" bash tools/gpu-tests/harness/run.sh ;;
    prune)
      step prune Rscript bench/prune.R "$out/prune.csv" ;;
    multi)
      step multi Rscript bench/gpu_multi.R "$out/gpu-multi.csv" ;;
    derivatives)
      step derivatives Rscript bench/derivatives.R "$out/derivatives.csv" ;;
    bandwidth)
      step bandwidth Rscript bench/bandwidth.R "$out/bandwidth.csv" ;;
    mixed)
      step mixed Rscript bench/mixed.R "$out/mixed.csv" "${MIXED_SIZES:-1e4,1e5,1e6}" ;;
    inference)
      step inference Rscript bench/inference.R "$out/inference.csv" ;;
    large)
      step large Rscript bench/prune_large.R "$out/prune-large.csv" ;;
    cdf)
      step cdf Rscript bench/cdf.R "$out/cdf.csv" ;;
    single)
      step single Rscript bench/single_precision.R "$out/single-precision.csv" ;;
    shapes)
      step shapes Rscript bench/shapes.R "$out/shapes.csv" cuda ;;
    fit)
      step fit Rscript bench/fit.R "$out/fit.csv" cuda ;;
    sums)
      step sums Rscript bench/single_large_sums.R ;;
    adaptive)
      step adaptive Rscript tools/gpu-tests/check_adaptive_gpu.R ;;
    gpuderiv)
      step gpuderiv Rscript tools/gpu-tests/check_gpuderiv.R ;;
    sanitize)
      step sanitize compute-sanitizer --tool memcheck --leak-check full Rscript -e '
        library(kdegpu); set.seed(1); x <- matrix(rnorm(3e4), ncol = 3)
        for (p in c("double", "single")) { f <- kde_gpu(x, backend = "cuda", precision = p)
          invisible(predict(f, x)); invisible(logLik(f)); invisible(sample(f, 2e4)) }
        f1 <- kde_gpu(x[, 1], backend = "cuda"); g <- kde_gpu(x, bw = c(0.3, 0.4, 0.5), backend = "cuda")
        options(kdegpu.devices = c(0, 0)); invisible(sample(f1, 3e4))
        options(kdegpu.gpu_memory = 2e5)
        invisible(predict(f1, seq(-3, 3, length.out = 500), type = "cdf"))
        invisible(predict(g, x[1:300, ], type = "cdf"))
        invisible(predict(f1, x[1:50, 1], type = "gradient"))
        invisible(predict(f, x[1:3000, ], type = "hessian"))
        g2 <- kde_gpu(x[1:2000, ], H = g$H, backend = "cuda")
        invisible(predict(g2, x[1:6000, ], type = "cdf", given = 1:2))
        options(kdegpu.gpu_memory = NULL)
        invisible(kdegpu:::gaussian_moments(x, rep(1, 1e4), x[1:500, ], 2L, "all", "cuda"))
        cat("sanitize workload done\n")' ;;
  esac
done
