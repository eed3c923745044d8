# Several GPUs against one, on a machine with two or more GPUs, after
# R CMD INSTALL .:
#
#   Rscript bench/gpu_multi.R [output.csv]   (default inst/benchmarks/gpu-multi.csv)
#
# Each shape is fitted and evaluated under options(kdegpu.devices = 0) and
# under every GPU, in the same run, alternating, and reports the median
# seconds (bench/timing.R), the speed-up, the share of pairs evaluated and
# the largest relative difference of the log-densities (two GPUs against
# one). Shapes: the full sum (tolerance = 0) at n = m = 1e6, d = 3, single
# and double; the default pruning on standard normal data and on a mixture
# of 20 tight Gaussians (work per query uneven: the GPUs claim batches as
# they free up); the few-queries shape (100 queries, the training set split
# across the GPUs).
suppressPackageStartupMessages(library(kdegpu))
args <- commandArgs(trailingOnly = TRUE)
out_csv <- if (length(args)) args[[1L]] else "inst/benchmarks/gpu-multi.csv"
source("bench/timing.R")

info <- kdegpu_info()
if (nrow(info$gpus) < 2L) stop("bench/gpu_multi.R needs two GPUs; this machine has ",
                               nrow(info$gpus))
all_gpus <- seq_len(nrow(info$gpus)) - 1L
device <- info$gpus$name[[1L]]

normal_data <- function(n, d, seed) {
  set.seed(seed)
  matrix(rnorm(n * d), n, d)
}
# 20 tight clusters (sd 1) with centres spread over [-50, 50]^d.
clustered_data <- function(n, d, seed) {
  set.seed(seed)
  centers <- matrix(runif(20 * d, -50, 50), 20, d)
  centers[sample.int(20, n, replace = TRUE), , drop = FALSE] + matrix(rnorm(n * d), n, d)
}

rows <- list()
measure <- function(case, data, n, m, d, precision, tolerance, reps = 3L) {
  x <- data(n, d, 1)
  q <- if (m == n) x else data(m, d, 2)
  fits <- lapply(list(one = 0L, all = all_gpus), function(devices) {
    options(kdegpu.devices = devices)
    kde_gpu(x, backend = "cuda", precision = precision)
  })
  run <- function(which) {
    options(kdegpu.devices = if (which == "one") 0L else all_gpus)
    predict(fits[[which]], q, log = TRUE, tolerance = tolerance)
  }
  p_one <- run("one")
  p_all <- run("all")
  share <- summary(fits$all)$pairs_share
  ok <- is.finite(p_one) & is.finite(p_all)
  diff <- max(abs(p_all[ok] - p_one[ok]) / pmax(1, abs(p_one[ok])))
  if (!identical(is.finite(p_one), is.finite(p_all))) diff <- Inf
  # alternate the two, so that clocks and temperature treat them alike
  t_one <- t_all <- numeric(reps)
  for (i in seq_len(reps)) {
    t_one[i] <- median_seconds(function() run("one"), 1L)
    t_all[i] <- median_seconds(function() run("all"), 1L)
  }
  options(kdegpu.devices = NULL)
  r <- data.frame(case = case, kernel = "gaussian", d = d, n = n, m = m,
                  precision = precision, tolerance = tolerance,
                  gpus = length(all_gpus), seconds_one = median(t_one),
                  seconds_all = median(t_all), speedup = median(t_one) / median(t_all),
                  pairs_share = share, max_rel_diff = diff)
  cat(sprintf("%-18s d=%d n=%.0e m=%.0e %-6s tol=%-6g  1 GPU %8.4f s  %d GPUs %8.4f s  x%.2f  share %.3f  diff %.1e\n",
              case, d, n, m, precision, tolerance, r$seconds_one, r$gpus, r$seconds_all,
              r$speedup, share, diff))
  rows[[length(rows) + 1L]] <<- r
  rm(fits); invisible(gc())
}

default_single <- kdegpu::default_tolerance[["single"]]
default_double <- kdegpu::default_tolerance[["double"]]
measure("full", normal_data, 1e6, 1e6, 3L, "single", 0)
measure("full", normal_data, 1e6, 1e6, 3L, "double", 0)
measure("pruned_normal", normal_data, 1e7, 1e7, 3L, "single", default_single)
measure("pruned_clustered", clustered_data, 1e6, 1e6, 3L, "single", default_single)
measure("pruned_clustered", clustered_data, 1e7, 1e7, 3L, "single", default_single)
measure("pruned_clustered", clustered_data, 1e6, 1e6, 3L, "double", default_double)
measure("few_queries", normal_data, 1e7, 100, 3L, "single", 0)
measure("few_queries", normal_data, 1e7, 100, 3L, "single", default_single)

results <- do.call(rbind, rows)
results$device <- device
write_bench_csv(results, out_csv)
cat(sprintf("\nDevice: %d x %s; wrote %s\n", length(all_gpus), device, out_csv))
