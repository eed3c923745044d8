# The GPU's pair threshold for a plan (src/cuda/tuning.cuh, kPlanMinPairs):
# few and sparse queries against smaller fits than bench/shapes.R's 1e7,
# median ms per call of a planned evaluation (KDEGPU_PLAN_MIN_PAIRS = 0),
# the default and the full sum (tolerance = 0); d = 3, N(0, I) points and
# queries, Scott's H. Prints one line per (precision, n, m).
#
#   Rscript bench/plan_threshold.R [single|double ...]
suppressPackageStartupMessages(library(kdegpu))
source("bench/timing.R")
precisions <- commandArgs(trailingOnly = TRUE)
if (length(precisions) == 0L) precisions <- c("single", "double")
set.seed(21)
q <- matrix(rnorm(3e4 * 3), ncol = 3)
ms <- function(f) 1e3 * median_seconds(f, reps = 7L)
for (precision in precisions) {
  for (n in c(2e5, 2e6)) {
    fit <- kde_gpu(matrix(rnorm(n * 3), ncol = 3), precision = precision)
    for (m in c(1, 10, 100, 300, 1000, 3000, 10000, 30000)) {
      qq <- q[seq_len(m), , drop = FALSE]
      Sys.setenv(KDEGPU_PLAN_MIN_PAIRS = "0")
      planned <- ms(function() predict(fit, qq))
      share <- summary(fit)$pairs_share
      Sys.unsetenv("KDEGPU_PLAN_MIN_PAIRS")
      default <- ms(function() predict(fit, qq))
      full <- ms(function() predict(fit, qq, tolerance = 0))
      cat(sprintf(paste("%s n=%.0e m=%d planned %.3f default %.3f full %.3f ms",
                        "planned/full %.2f default/full %.2f share %.3f\n"),
                  precision, n, m, planned, default, full, planned / full, default / full,
                  share))
    }
  }
}
