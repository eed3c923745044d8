# Spatial tiles: what skipping with proven bounds gains (predict(), median
# seconds after a warm-up, default tolerance), against every tile visited
# (options(kdegpu.spatial = FALSE), tolerance = 0) measured in the same run, on the backend this machine has (the GPU when usable):
#
#   Rscript bench/prune.R [output.csv]     (default inst/benchmarks/prune.csv)
#
# Shapes: normal data and clustered data (20 tight clusters), d = 1, 2, 3,
# n = m (1e6 on a GPU, 1e5 on the CPU), the Gaussian (default tolerance)
# and the Epanechnikov kernel (exact skipping); on a GPU also n = 1e5..3e6
# at d = 3 and d = 5, 8, 16 at n = 1e6 (single Gaussian). Each row has the
# share of pairs evaluated. The CSV records the device, the date and the
# commit.
suppressPackageStartupMessages(library(kdegpu))
args <- commandArgs(trailingOnly = TRUE)
out_csv <- if (length(args)) args[[1L]] else "inst/benchmarks/prune.csv"
source("bench/timing.R")
info <- kdegpu_info()
gpu <- nrow(info$gpus) > 0L
device <- if (gpu) info$gpus$name[[1L]] else sprintf("CPU, %d threads", info$threads)
n <- as.numeric(Sys.getenv("KDEGPU_BENCH_N", if (gpu) "1e6" else "1e5"))

make_data <- function(kind, n, d, seed) {
  set.seed(seed)
  if (kind == "normal") return(matrix(rnorm(n * d), n, d))
  centres <- matrix(runif(20 * d, -50, 50), 20, d)
  centres[sample.int(20, n, replace = TRUE), , drop = FALSE] + matrix(rnorm(n * d), n, d)
}

rows <- list()
# One row: the full sum (every tile, tolerance = 0) against the default
# pruned evaluation of the same data, with the share of pairs evaluated.
measure <- function(study, kind, x, q, kernel, precision) {
  fit <- kde_gpu(x, kernel = kernel, precision = precision)
  # the baseline: the same fit with no spatial order visits every tile
  old <- options(kdegpu.spatial = FALSE)
  brute <- kde_gpu(x, kernel = kernel, precision = precision)
  options(old)
  full <- predict(brute, q, log = TRUE, tolerance = 0)
  pruned <- predict(fit, q, log = TRUE)
  share <- summary(fit)$pairs_share
  finite <- is.finite(full)
  t_full <- median_seconds(function() predict(brute, q, tolerance = 0), 3L)
  t_pruned <- median_seconds(function() predict(fit, q), 3L)
  r <- data.frame(
    study = study, data = kind, d = ncol(x), n = nrow(x), m = nrow(q), kernel = kernel,
    precision = precision, backend = fit$backend, full_s = t_full, pruned_s = t_pruned,
    speedup = t_full / t_pruned, pairs_share = share,
    max_log_diff = max(abs(full[finite] - pruned[finite]), 0),
    same_zeros = identical(is.finite(full), is.finite(pruned)))
  rows[[length(rows) + 1L]] <<- r
  cat(sprintf("%-8s %-9s d=%-2d n=%.0e %-12s %-6s full %.3fs pruned %.3fs (%.1fx) pairs %.4f max|dlog| %.1e\n",
              study, kind, r$d, r$n, kernel, precision, t_full, t_pruned, r$speedup, share,
              r$max_log_diff))
}

for (kind in c("normal", "clustered")) {
  for (d in 1:3) {
    x <- make_data(kind, n, d, 1)
    q <- make_data(kind, n, d, 2)
    for (precision in if (gpu) c("single", "double") else "double") {
      # double on the GPU: the Gaussian at d = 3 only (its full sum is slow)
      if (gpu && precision == "double" && d != 3L) next
      for (kernel in if (gpu && precision == "double") "gaussian" else c("gaussian", "epanechnikov")) {
        measure("shapes", kind, x, q, kernel, precision)
      }
    }
  }
}
# On the GPU: time against n (d = 3) and the share of pairs against d
# (n = 1e6), single-precision Gaussian on normal data.
if (gpu && !nzchar(Sys.getenv("KDEGPU_BENCH_N"))) {
  for (size in c(1e5, 3e5, 3e6)) {
    measure("scaling", "normal", make_data("normal", size, 3, 1), make_data("normal", size, 3, 2),
            "gaussian", "single")
  }
  for (d in c(5, 8, 16)) {
    measure("dims", "normal", make_data("normal", n, d, 1), make_data("normal", n, d, 2),
            "gaussian", "single")
  }
}
results <- do.call(rbind, rows)
results$device <- device
results$date <- format(Sys.Date())
results$commit <- bench_commit()
dir.create(dirname(out_csv), showWarnings = FALSE, recursive = TRUE)
write.csv(results, out_csv, row.names = FALSE)
cat("wrote", out_csv, "\n")
