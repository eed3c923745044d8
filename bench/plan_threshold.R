# The GPU's thresholds for a plan (src/cuda/tuning.cuh, kPlanMinPairs and
# kPlanMinPairsOneBlock): few and sparse queries against smaller fits than
# bench/shapes.R's 1e7, the median ms per call of a planned evaluation
# (KDEGPU_PLAN_MIN_PAIRS = 0), the default and the full sum (tolerance =
# 0), and the planned over the full sum's time; d = 3, N(0, I) points and
# queries, Scott's H. One line per (precision, n, m):
#   one block:   m = 1 and 128 against n = 5e5 .. 5e6;
#   more blocks: m x n = 5e8 .. 8e9 pairs against n = 2e5 .. 2e6.
#
#   Rscript bench/plan_threshold.R [one] [more] [single] [double]
suppressPackageStartupMessages(library(kdegpu))
source("bench/timing.R")
args <- commandArgs(trailingOnly = TRUE)
pick <- function(choices) if (any(args %in% choices)) intersect(choices, args) else choices
shapes <- pick(c("one", "more"))
precisions <- pick(c("single", "double"))
set.seed(21)
q <- matrix(rnorm(4e4 * 3), ncol = 3)
ms <- function(f) 1e3 * median_seconds(f, reps = 5L)
for (shape in shapes) {
  for (precision in precisions) {
    ns <- if (shape == "one") c(5e5, 1e6, 2e6, 5e6) else c(2e5, 5e5, 2e6)
    for (n in ns) {
      fit <- kde_gpu(matrix(rnorm(n * 3), ncol = 3), precision = precision)
      m_values <- if (shape == "one") c(1, 128) else round(c(5e8, 1e9, 2e9, 4e9, 8e9) / n)
      for (m in m_values[m_values <= nrow(q)]) {
        qq <- q[seq_len(m), , drop = FALSE]
        Sys.setenv(KDEGPU_PLAN_MIN_PAIRS = "0")
        planned <- ms(function() predict(fit, qq))
        share <- summary(fit)$pairs_share
        Sys.unsetenv("KDEGPU_PLAN_MIN_PAIRS")
        default <- ms(function() predict(fit, qq))
        full <- ms(function() predict(fit, qq, tolerance = 0))
        cat(sprintf(paste("%s %s n=%.0e m=%d pairs %.1e planned %.3f default %.3f full %.3f",
                          "ms planned/full %.2f default/full %.2f share %.3f\n"),
                    shape, precision, n, m, n * m, planned, default, full, planned / full,
                    default / full, share))
      }
    }
  }
}
