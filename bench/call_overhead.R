# Where a small GPU evaluation's time goes: predict() of m = 1 to 1e4
# queries against n = 1e4 and 1e6 points (Gaussian, d = 3, single), at
# tolerance = 0 (no plan) and at the default (planned), beside the same
# calls on a CPU fit of 10 points (R's own cost per call). With
# KDEGPU_TRACE=<file> the backend appends each evaluation's setup and loop
# times there.
#   Rscript bench/call_overhead.R [output.csv]
suppressPackageStartupMessages(library(kdegpu))
source("bench/timing.R")
args <- commandArgs(trailingOnly = TRUE)
out_csv <- if (length(args)) args[[1L]] else ""
set.seed(1)
tiny <- kde_gpu(matrix(rnorm(30), ncol = 3), backend = "cpu")
rows <- list()
add <- function(what, n, m, tolerance, seconds) {
  rows[[length(rows) + 1L]] <<- data.frame(what = what, n = n, m = m,
                                           tolerance = tolerance, ms = 1e3 * seconds)
  cat(sprintf("%-16s n=%-7g m=%-6g tolerance=%-8s %8.3f ms\n", what, n, m, tolerance,
              1e3 * seconds))
}
for (m in c(1, 10, 100, 1000, 10000)) {
  q <- matrix(rnorm(3 * m), ncol = 3)
  add("cpu, 10 points", 10, m, "default", median_seconds(function() predict(tiny, q), 7L))
}
if (nrow(kdegpu_info()$gpus) > 0) {
  for (n in c(1e4, 1e6)) {
    fit <- kde_gpu(matrix(rnorm(3 * n), ncol = 3), backend = "cuda", precision = "single")
    for (m in c(1, 10, 100, 1000, 10000)) {
      q <- matrix(rnorm(3 * m), ncol = 3)
      add("cuda", n, m, "0", median_seconds(function() predict(fit, q, tolerance = 0), 7L))
      add("cuda", n, m, "default", median_seconds(function() predict(fit, q), 7L))
    }
  }
}
if (nzchar(out_csv)) {
  res <- do.call(rbind, rows)
  res$device <- if (nrow(kdegpu_info()$gpus) > 0) kdegpu_info()$gpus$name[[1L]] else "CPU"
  res$date <- format(Sys.Date())
  res$commit <- bench_commit()
  utils::write.csv(res, out_csv, row.names = FALSE)
}
