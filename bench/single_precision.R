# Single precision against double on the GPU: the Gaussian's path each fit
# takes at the call's tolerance, the default 1e-7 and 1e-4 (print(): tensor
# cores, expanded form or difference form, chosen by the predicted rounding
# against the tolerance, src/cuda/model.cu), that prediction, the errors,
# and the single-precision time of the full sum and the default (pruned)
# evaluation, n = m = 1e6 (d = 64: n = 2e5). Standard normal data at
# Scott's rule and 5x narrower, with and without an offset of 1e4:
#
#   Rscript bench/single_precision.R [output.csv]
#     (default inst/benchmarks/single-precision.csv; needs a GPU)
#
# Errors over 5e4 training points and 5e4 new points from the same law:
# log_err is the tests' measure, |log f32 - log f64| / max(1, |log f64|);
# abs_log_err is |log f32 - log f64|, the relative error of the density,
# which far from all the data is float's limit on the exponent (about
# 6e-8 D^2 at D bandwidths), whatever the form; at_data_err is that at the
# training points.
suppressPackageStartupMessages(library(kdegpu))
args <- commandArgs(trailingOnly = TRUE)
out_csv <- if (length(args)) args[[1L]] else "inst/benchmarks/single-precision.csv"
source("bench/timing.R")
info <- kdegpu_info()
if (nrow(info$gpus) == 0L) stop("bench/single_precision.R needs a usable GPU")
options(kdegpu.devices = 0L)

predicted_rounding <- function(fit) {
  z <- sweep(fit$z, 2, colMeans(fit$z))
  (0.4 + ncol(z) / 20) * 2^-24 * max(rowSums(z^2)) * log2(exp(1))
}

measure <- function(d, n, adjust, offset, tolerance, time = TRUE) {
  old <- options(kdegpu.tolerance = tolerance)
  on.exit(options(old))
  set.seed(d)
  x <- matrix(rnorm(n * d), n)
  q <- rbind(x[1:5e4, ], matrix(rnorm(5e4 * d), ncol = d)) + offset
  x <- x + offset
  single <- kde_gpu(x, bw = "scott", adjust = adjust, precision = "single")
  double <- kde_gpu(x, bw = "scott", adjust = adjust, precision = "double")
  ps <- predict(single, q, log = TRUE)
  pd <- predict(double, q, log = TRUE)
  ok <- is.finite(pd)
  at <- seq_len(5e4)
  full_s <- pruned_s <- NA_real_
  if (time) {
    qq <- x[sample.int(n, 1e6, replace = TRUE), , drop = FALSE]
    full_s <- median_seconds(function() predict(single, qq, tolerance = 0), 3L)
    pruned_s <- median_seconds(function() predict(single, qq), 3L)
  }
  path <- sub(".*\\((.*)\\)$", "\\1", kdegpu:::backend_label(single))
  row <- data.frame(d = d, n = n, bandwidth = if (adjust == 1) "scott" else "scott/5",
                    offset = offset, tolerance = tolerance, path = path, predicted = predicted_rounding(single),
                    log_err = max(abs(ps[ok] - pd[ok]) / pmax(1, abs(pd[ok]))),
                    abs_log_err = max(abs(ps[ok] - pd[ok])),
                    at_data_err = max(abs(ps[at] - pd[at])),
                    full_s = full_s, pruned_s = pruned_s, device = info$gpus$name[[1L]])
  print(row, row.names = FALSE)
  invisible(gc())
  row
}

rows <- list()
for (tolerance in c(1e-7, 1e-4)) {
  for (d in c(3, 16, 64)) for (adjust in c(1, 1 / 5)) for (offset in c(0, 1e4))
    rows[[length(rows) + 1L]] <- measure(d, if (d == 64) 2e5 else 1e6, adjust, offset,
                                         tolerance, time = offset == 0)
  rows[[length(rows) + 1L]] <- measure(3, 1e7, 1, 0, tolerance, time = FALSE)
  rows[[length(rows) + 1L]] <- measure(5, 1e6, 1, 0, tolerance)
}
write_bench_csv(do.call(rbind, rows), out_csv)
cat("wrote", out_csv, "\n")
