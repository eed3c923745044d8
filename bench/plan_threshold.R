# The GPU's thresholds for a plan (src/cuda/tuning.cuh: kPlanMinPairs,
# kPlanMinPairsOneBlock, and below them kPlanLocalShare's band): the median
# ms per call of a planned evaluation (KDEGPU_PLAN_MIN_PAIRS = 0), the
# default and the full sum (tolerance = 0), the planned and the default
# over the full sum's time, and the default's share of the pairs (1: not
# planned). One line per (shape, precision, n, m):
#   one:       m = 1 and 128 N(0, I) queries against n = 5e5 .. 5e6 N(0, I)
#              points, d = 3, Scott's H;
#   more:      m x n = 5e8 .. 8e9 pairs of the same against n = 2e5 .. 2e6;
#   clustered: bench/shapes.R's clustered set (2e5 points, bw 0.25, d = 2
#              and 3), m = 1 .. 5,300 of its queries (a random subset);
#   gps:       bench/shapes.R's GPS-like set (1e6 points, bw 1), m = 1 ..
#              2,000 queries at points.
#
#   Rscript bench/plan_threshold.R [one] [more] [clustered] [gps] [single] [double]
suppressPackageStartupMessages(library(kdegpu))
source("bench/timing.R")
source("bench/shape_data.R")
args <- commandArgs(trailingOnly = TRUE)
pick <- function(choices) if (any(args %in% choices)) intersect(choices, args) else choices
shapes <- pick(c("one", "more", "clustered", "gps"))
precisions <- pick(c("single", "double"))
ms <- function(f) 1e3 * median_seconds(f, reps = 5L)
line <- function(label, fit, q) {
  Sys.setenv(KDEGPU_PLAN_MIN_PAIRS = "0")
  planned <- ms(function() predict(fit, q))
  Sys.unsetenv("KDEGPU_PLAN_MIN_PAIRS")
  default <- ms(function() predict(fit, q))
  share <- summary(fit)$pairs_share
  full <- ms(function() predict(fit, q, tolerance = 0))
  cat(sprintf(paste("%s m=%d pairs %.1e planned %.3f default %.3f full %.3f ms",
                    "planned/full %.2f default/full %.2f share %.3f\n"),
              label, nrow(q), nrow(q) * fit$n, planned, default, full, planned / full,
              default / full, share))
}
q_normal <- normal(4e4, 3, 21)
for (precision in precisions) {
  for (shape in intersect(shapes, c("one", "more"))) {
    ns <- if (shape == "one") c(5e5, 1e6, 2e6, 5e6) else c(2e5, 5e5, 2e6)
    for (n in ns) {
      fit <- kde_gpu(normal(n, 3, 20), precision = precision)
      m_values <- if (shape == "one") c(1, 128) else round(c(5e8, 1e9, 2e9, 4e9, 8e9) / n)
      for (m in m_values[m_values <= nrow(q_normal)])
        line(sprintf("%s %s n=%.0e", shape, precision, n), fit,
             q_normal[seq_len(m), , drop = FALSE])
    }
  }
  if ("clustered" %in% shapes) {
    for (d in 2:3) {
      x <- clustered(2e5, d, 1)
      q <- clustered_queries(x, 2)
      set.seed(3)
      q <- q[sample.int(nrow(q)), , drop = FALSE]
      fit <- kde_gpu(x, bw = 0.25, precision = precision)
      for (m in c(1, 128, 640, 1280, 2560, 5300))
        line(sprintf("clustered %s d=%d", precision, d), fit, q[seq_len(m), , drop = FALSE])
    }
  }
  if ("gps" %in% shapes) {
    x <- gps(1e6, 1)
    set.seed(2)
    q <- x[sample.int(nrow(x), 2000L), ] + matrix(rnorm(4000, sd = 0.5), 2000, 2)
    fit <- kde_gpu(x, bw = 1, precision = precision)
    for (m in c(1, 128, 500, 1000, 2000))
      line(sprintf("gps %s", precision), fit, q[seq_len(m), , drop = FALSE])
  }
}
