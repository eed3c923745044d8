# The GPU's pair threshold for a plan (src/cuda/tuning.cuh,
# kPlanMinPairs): few and sparse queries against smaller fits than
# bench/shapes.R's 1e7, the default tolerance against tolerance = 0 (the
# full sum), median ms per call; single, d = 3, N(0, I) points and queries,
# Scott's H. Prints one line per (n, m).
#
#   Rscript bench/plan_threshold.R
suppressPackageStartupMessages(library(kdegpu))
source("bench/timing.R")
set.seed(21)
q <- matrix(rnorm(3e4 * 3), ncol = 3)
for (n in c(2e5, 2e6)) {
  fit <- kde_gpu(matrix(rnorm(n * 3), ncol = 3), precision = "single")
  for (m in c(1, 10, 100, 1000, 3000, 10000, 30000)) {
    qq <- q[seq_len(m), , drop = FALSE]
    d <- median_seconds(function() predict(fit, qq), reps = 7L)
    share <- summary(fit)$pairs_share
    f <- median_seconds(function() predict(fit, qq, tolerance = 0), reps = 7L)
    cat(sprintf("n=%.0e m=%d default %.3f ms full %.3f ms ratio %.2f share %.3f\n",
                n, m, 1e3 * d, 1e3 * f, d / f, share))
  }
}
