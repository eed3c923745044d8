# Bandwidth-selection benchmark:
#
#   Rscript bench/bandwidth.R [output.csv]   (default inst/benchmarks/bandwidth.csv)
#
# Time of bw_lscv() and bw_mlcv() with a full H in d = 2: n = 1e4 on the CPU;
# n = 1e5 (and one criterion evaluation at 1e6) on the GPU when one is usable;
# next to ks::Hlscv at the largest n it handles in about a minute.
suppressPackageStartupMessages(library(kdegpu))
args <- commandArgs(trailingOnly = TRUE)
out_csv <- if (length(args)) args[[1L]] else "inst/benchmarks/bandwidth.csv"
info <- kdegpu_info()
source("bench/timing.R") # bench_commit()
device <- if (nrow(info$gpus)) info$gpus$name[[1L]] else "none"

make_data <- function(n) {
  set.seed(1)
  matrix(rnorm(2 * n), n) %*% matrix(c(1, 0.6, 0, 0.8), 2)
}
rows <- list()
record <- function(method, backend, n, seconds, evaluations = NA) {
  rows[[length(rows) + 1L]] <<- data.frame(method = method, backend = backend, n = n,
                                            seconds = seconds, evaluations = evaluations)
  cat(sprintf("%-22s %-5s n=%-8.0e %8.2f s  %s\n", method, backend, n, seconds,
              if (is.na(evaluations)) "" else paste(evaluations, "criterion evaluations")))
}
timed <- function(method, backend, n, f) {
  t <- system.time(res <- f())[["elapsed"]]
  record(method, backend, n, t, if (is.null(attr(res, "trace"))) NA else nrow(attr(res, "trace")))
}

x <- make_data(1e4)
timed("bw_lscv full", "cpu", 1e4, function() bw_lscv(x, type = "full", backend = "cpu"))
timed("bw_mlcv full", "cpu", 1e4, function() bw_mlcv(x, type = "full", backend = "cpu"))
if (requireNamespace("ks", quietly = TRUE)) {
  for (n in c(1e3, 2e3, 4e3)) {
    xs <- make_data(n)
    t <- system.time(ks::Hlscv(xs))[["elapsed"]]
    record("ks::Hlscv", "cpu", n, t)
    if (t > 30) break
  }
}
if (nrow(info$gpus)) {
  x <- make_data(1e5)
  timed("bw_lscv full", "cuda", 1e5, function() bw_lscv(x, type = "full", backend = "cuda"))
  timed("bw_mlcv full", "cuda", 1e5, function() bw_mlcv(x, type = "full", backend = "cuda"))
  x <- make_data(1e6)
  H <- 1e6^(-1 / 3) * cov(x)
  t <- system.time(kdegpu:::cv_criterion(x, rep(1e-6, 1e6), H, "gaussian", "cuda", "double",
                                         "lscv"))[["elapsed"]]
  record("one LSCV evaluation", "cuda", 1e6, t)
}
results <- do.call(rbind, rows)
# CPU rows name the CPU and its threads, not the machine's GPU.
results$device <- ifelse(results$backend == "cpu", sprintf("CPU (%d threads)", info$threads),
                         device)
results$date <- format(Sys.Date())
results$commit <- bench_commit()
results$kdegpu_version <- as.character(packageVersion("kdegpu"))
dir.create(dirname(out_csv), showWarnings = FALSE, recursive = TRUE)
write.csv(results, out_csv, row.names = FALSE)
