# The shapes users run, beyond the benchmarks' dense normal data: the
# default tolerance against `tolerance = 0` (the full sum) in one run, with
# the share of pairs evaluated and the accuracy against the CPU backend's
# full double sum, and, on the clustered and GPS-like sets, against a
# plain-R sum over the raw coordinates (max_rel_err_exact: the first 300
# queries near the data; no whitening at all, so what either backend loses
# to coordinates thousands of bandwidths from the centre shows).
#
#   Rscript bench/shapes.R [out.csv] [backend]    (backend: cuda or cpu)
#
# Rows (Gaussian, Scott's H unless said):
#   few:       m = 1 .. 1e5 (CPU: 1e3) standard-normal queries against n = 1e7 (GPU) or
#              1e6 (CPU) standard-normal points, d = 3 (GPU) / 2 (CPU);
#   sparse:    the share at m = 1e5 and 1e6 against the same fit, to set
#              beside m = n (dense);
#   clustered: 2e5 points in 20 clusters (sd 1) on a 5 x 4 grid 200 apart,
#              bw 0.25 (the data span ~3,200 bandwidths), d = 2 and 3; 5,300
#              queries: 2,000 inside, 2,000 between neighbouring clusters,
#              1,300 far (uniform over three times the data's box);
#   gps:       1e6 points uniform over 4,000 x 4,000 bandwidths (bw 1),
#              2,000 queries at points jittered by half a bandwidth.
# KDEGPU_SHAPES picks rows by case (a regular expression).
suppressPackageStartupMessages(library(kdegpu))
args <- commandArgs(trailingOnly = TRUE)
out_csv <- if (length(args) >= 1L) args[[1L]] else "inst/benchmarks/shapes.csv"
backend <- if (length(args) >= 2L) args[[2L]] else "cuda"
source("bench/timing.R")
pick <- Sys.getenv("KDEGPU_SHAPES", ".")

info <- kdegpu_info()
device <- if (backend == "cuda") info$gpus$name[[1L]] else
  sprintf("CPU, %d threads", getOption("kdegpu.threads", parallel::detectCores()))
gpu <- backend == "cuda"

source("bench/shape_data.R")

rows <- list()
# One row: the default tolerance and tolerance = 0 timed alternately, the
# share of the default's pairs, and both precisions' accuracy on the GPU.
measure <- function(case, fit, q, reference = NULL, reps = 5L, full = TRUE, plain = NULL) {
  run <- function(tol) predict(fit, q, log = TRUE, tolerance = tol)
  tol_default <- default_tolerance[[fit$precision]]
  got <- run(tol_default)
  share <- summary(fit)$pairs_share
  err <- err_near <- err_log <- NA_real_
  err_exact <- if (is.null(plain)) NA_real_ else
    max(abs(expm1(got[seq_along(plain)] - plain)))
  if (!is.null(reference)) {
    ok <- is.finite(reference)
    # relative error of the density, |exp(log f - log f_ref) - 1|: over all
    # queries, and near the data (log f within 20 of the largest), since far
    # out, D bandwidths from every point, both backends keep only eps D^2
    # of the exponent; and the tests' measure of log f
    rel <- abs(expm1(got[ok] - reference[ok]))
    err <- max(rel)
    err_near <- max(rel[reference[ok] > max(reference[ok]) - 20])
    err_log <- max(abs(got[ok] - reference[ok]) / pmax(1, abs(reference[ok])))
    if (!identical(is.finite(got), ok)) err <- err_near <- err_log <- Inf
  }
  t_default <- t_full <- rep(NA_real_, reps)
  for (i in seq_len(reps)) {
    t_default[i] <- median_seconds(function() run(tol_default), 1L)
    if (full) t_full[i] <- median_seconds(function() run(0), 1L)
  }
  r <- data.frame(case = case, backend = backend, d = fit$d, n = fit$n, m = nrow(q),
                  precision = fit$precision, path = fit_path(fit),
                  seconds_default = median(t_default), seconds_full = median(t_full),
                  ratio = median(t_default) / median(t_full), pairs_share = share,
                  max_rel_err = err, max_rel_err_near = err_near, max_log_err = err_log,
                  max_rel_err_exact = err_exact)
  cat(sprintf("%-10s d=%d n=%.0e m=%-6.0e %-6s %-16s default %9.5f s  full %9.5f s  ratio %5.2f  share %.3f  err %.1e (near %.1e, log %.1e, exact %.1e)\n",
              case, r$d, r$n, r$m, r$precision, r$path, r$seconds_default, r$seconds_full,
              r$ratio, share, err, err_near, err_log, err_exact))
  rows[[length(rows) + 1L]] <<- r
}
fit_path <- function(fit) {
  handle <- fit$device$handle
  if (is.environment(fit$device) && !is.null(handle)) attr(handle, "path") else "cpu"
}
exact <- function(x, q, bw = "scott") {
  predict(kde_gpu(x, bw = bw, backend = "cpu"), q, log = TRUE, tolerance = 0)
}
# The Gaussian log-density with H = bw^2 I at each row of q, summed in plain
# R over the raw coordinates: differences first, then scaled.
plain_log_density <- function(x, q, bw) {
  d <- ncol(x)
  vapply(seq_len(nrow(q)), function(i) {
    s2 <- 0
    for (k in seq_len(d)) s2 <- s2 + ((q[i, k] - x[, k]) / bw)^2
    e <- -s2 / 2
    top <- max(e)
    top + log(sum(exp(e - top))) - log(nrow(x)) - d * log(bw) - d / 2 * log(2 * pi)
  }, 0)
}

if (grepl(pick, "few") || grepl(pick, "sparse")) {
  n <- if (gpu) 1e7 else 1e6
  d <- if (gpu) 3L else 2L
  x <- normal(n, d, 1)
  fit <- kde_gpu(x, backend = backend, precision = if (gpu) "single" else "double")
  for (m in c(1, 10, 100, 1000, 1e4, 1e5)) {
    if (!gpu && m > 1000) next
    if (grepl(pick, "few")) measure("few", fit, normal(m, d, 2), reps = 3L)
  }
  if (grepl(pick, "sparse") && gpu) {
    for (m in c(1e5, 1e6)) measure("sparse", fit, normal(m, d, 3), reps = 3L)
    # the full sum of m = n = 1e7 takes ~50 s: the default's share only
    measure("dense", fit, x, reps = 1L, full = FALSE)
  }
  rm(fit, x); invisible(gc())
}
if (grepl(pick, "clustered")) {
  for (d in 2:3) {
    x <- clustered(2e5, d, 1)
    q <- clustered_queries(x, 2)
    ref <- exact(x, q, bw = 0.25)
    plain <- plain_log_density(x, q[1:300, , drop = FALSE], 0.25) # inside
    for (p in if (gpu) c("double", "single") else "double")
      measure("clustered", kde_gpu(x, bw = 0.25, backend = backend, precision = p), q, ref,
              plain = plain)
  }
}
if (grepl(pick, "gps")) {
  x <- gps(1e6, 1)
  set.seed(2)
  q <- x[sample.int(nrow(x), 2000L), ] + matrix(rnorm(4000, sd = 0.5), 2000, 2)
  ref <- exact(x, q, bw = 1)
  plain <- plain_log_density(x, q[1:300, , drop = FALSE], 1)
  for (p in if (gpu) c("double", "single") else "double")
    measure("gps", kde_gpu(x, bw = 1, backend = backend, precision = p), q, ref, plain = plain)
}

results <- do.call(rbind, rows)
results$device <- device
write_bench_csv(results, out_csv)
cat(sprintf("\nDevice: %s; wrote %s\n", device, out_csv))
