# The time of a fit itself, kde_gpu() (bandwidth rule, whitening, spatial
# order, and on the GPU packing and upload), standard normal data, d = 3,
# Scott's rule:
#
#   Rscript bench/fit.R [out.csv] [backend] [largest n]
#
# (backend cuda: single precision; n = 1e6, 1e7, 1e8 up to the largest;
# the median of 3 fits, one at 1e8).
suppressPackageStartupMessages(library(kdegpu))
args <- commandArgs(trailingOnly = TRUE)
out_csv <- if (length(args) >= 1L) args[[1L]] else "inst/benchmarks/fit.csv"
backend <- if (length(args) >= 2L) args[[2L]] else "cuda"
largest <- if (length(args) >= 3L) as.numeric(args[[3L]]) else 1e8
source("bench/timing.R")
info <- kdegpu_info()
device <- if (backend == "cuda") info$gpus$name[[1L]] else "CPU"
precision <- if (backend == "cuda") "single" else "double"

rows <- list()
for (n in c(1e6, 1e7, 1e8)) {
  if (n > largest) break
  set.seed(1)
  x <- matrix(rnorm(3 * n), n, 3)
  reps <- if (n >= 1e8) 1L else 3L
  times <- vapply(seq_len(reps), function(i) {
    gc()
    system.time(fit <- kde_gpu(x, backend = backend, precision = precision))[["elapsed"]]
  }, 0)
  rows[[length(rows) + 1L]] <- data.frame(n = n, d = 3L, backend = backend,
                                          precision = precision, seconds = median(times),
                                          threads = getOption("kdegpu.threads",
                                                              parallel::detectCores()))
  cat(sprintf("fit n = %.0e: %.2f s\n", n, median(times)))
  rm(x); invisible(gc())
}
results <- do.call(rbind, rows)
results$device <- device
write_bench_csv(results, out_csv)
cat("wrote", out_csv, "\n")
