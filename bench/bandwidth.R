# Bandwidth-selection benchmark:
#
#   Rscript bench/bandwidth.R [output.csv]   (default inst/benchmarks/bandwidth.csv)
#
# Time of bw_lscv() and bw_mlcv() with a full H in d = 2: n = 1e4 on the CPU;
# n = 1e5 and 1e6 (and one criterion evaluation at 1e6) on the GPU when one is usable;
# next to ks::Hlscv at the largest n it handles in about a minute. The
# plug-in selectors with exact pair sums (bw = "SJ" in 1-D, bw_plugin() and
# bw_scv() in 2-D): n = 1e4 on the CPU, next to ks::Hpi() (binned, its
# default there, and unbinned) and stats::bw.SJ(); n = 1e6 on the GPU.
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
timed("bw_lscv full", "cpu", 1e4, function() bw_lscv(x, shape = "full", backend = "cpu"))
timed("bw_mlcv full", "cpu", 1e4, function() bw_mlcv(x, shape = "full", backend = "cpu"))
if (requireNamespace("ks", quietly = TRUE)) {
  for (n in c(1e3, 2e3, 4e3)) {
    xs <- make_data(n)
    t <- system.time(ks::Hlscv(xs))[["elapsed"]]
    record("ks::Hlscv", "cpu", n, t)
    if (t > 30) break
  }
}
# plug-in selectors
x <- make_data(1e4)
timed("bw_sj (SJ-ste) 1-D", "cpu", 1e4, function() bw_sj(x[, 1], backend = "cpu"))
timed("bw_plugin full", "cpu", 1e4, function() bw_plugin(x, backend = "cpu"))
timed("bw_plugin diagonal", "cpu", 1e4, function() bw_plugin(x, "diagonal", backend = "cpu"))
timed("bw_scv full", "cpu", 1e4, function() bw_scv(x, backend = "cpu"))
timed("stats::bw.SJ nb=1e5", "cpu", 1e4, function() stats::bw.SJ(x[, 1], nb = 1e5))
if (requireNamespace("ks", quietly = TRUE)) {
  timed("ks::Hpi binned", "cpu", 1e4, function() ks::Hpi(x))
  timed("ks::Hpi unbinned", "cpu", 1e4, function() ks::Hpi(x, binned = FALSE))
}
if (nrow(info$gpus)) {
  x <- make_data(1e6)
  timed("bw_sj (SJ-ste) 1-D", "cuda", 1e6, function() bw_sj(x[, 1], backend = "cuda"))
  timed("bw_plugin full", "cuda", 1e6, function() bw_plugin(x, backend = "cuda"))
  timed("bw_scv full", "cuda", 1e5, function() bw_scv(x[1:1e5, ], backend = "cuda"))
}
if (nrow(info$gpus)) {
  x <- make_data(1e5)
  timed("bw_lscv full", "cuda", 1e5, function() bw_lscv(x, shape = "full", backend = "cuda"))
  timed("bw_mlcv full", "cuda", 1e5, function() bw_mlcv(x, shape = "full", backend = "cuda"))
  x <- make_data(1e6)
  H <- 1e6^(-1 / 3) * cov(x)
  t <- system.time(kdegpu:::cv_criterion(x, rep(1e-6, 1e6), H, "gaussian", "cuda", "double",
                                         "lscv"))[["elapsed"]]
  record("one LSCV evaluation", "cuda", 1e6, t)
  # issue 15's target: the whole full-H search at n = 1e6 in under a minute
  timed("bw_lscv full", "cuda", 1e6, function() bw_lscv(x, shape = "full", backend = "cuda"))
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
