# Issue 15's large shapes on one GPU: n = m = 1e7 (d = 2 and 3, single;
# d = 3, double) and n = m = 1e8 (d = 3, single), standard normal data,
# Gaussian, Scott's H: predict() at the default tolerance against the full
# sum (every tile, tolerance = 0). The full sum's time is linear in the
# number of queries, so it is measured on the first `slice` queries and
# scaled to m (at 1e8 the whole of it would take about an hour); the
# pruned result is checked against it on that slice.
#
# s3x5e8: n = m = 5e8 on two GPUs (options(kdegpu.devices = c(0, 1))); the
# points are drawn by the GPU's sampler (a fit of two points at 0 with H = I:
# exactly N(0, I)), R's rnorm() would take a minute, and the queries are the
# points themselves (a second matrix of 12 GB); its full sum is the
# spatial fit's own at tolerance = 0 (a second fit of 5e8 points would take
# the time of the first).
#
# s3x1e9: n = 1e9 on four GPUs (options(kdegpu.devices = 0:3)), the same
# data made the same way; the queries are the first m = 2.5e8 points (whole
# batches of a random sample: the evaluation's time is linear in m, and
# n = m = 1e9 with the fit does not fit in one device call of 10 minutes).
#
#   KDEGPU_LARGE="s2,s3,d3,s3e8" Rscript bench/prune_large.R [out.csv]
#
# (default inst/benchmarks/prune-large.csv; KDEGPU_LARGE picks the rows)
suppressPackageStartupMessages(library(kdegpu))
source("bench/timing.R")
args <- commandArgs(trailingOnly = TRUE)
out_csv <- if (length(args)) args[[1L]] else "inst/benchmarks/prune-large.csv"
info <- kdegpu_info()
if (nrow(info$gpus) == 0L) stop("bench/prune_large.R needs a usable GPU")
shapes <- list(
  s2 = list(d = 2, n = 1e7, precision = "single", slice = 1e6, reps = 3L),
  s3 = list(d = 3, n = 1e7, precision = "single", slice = 1e6, reps = 3L),
  d3 = list(d = 3, n = 1e7, precision = "double", slice = 1e5, reps = 1L),
  s3e8 = list(d = 3, n = 1e8, precision = "single", slice = 1e5, reps = 1L),
  s3x5e8 = list(d = 3, n = 5e8, precision = "single", slice = 2e4, reps = 1L, devices = 0:1,
                queries = "points", brute = FALSE),
  s3x1e9 = list(d = 3, n = 1e9, m = 2.5e8, precision = "single", slice = 1e4, reps = 1L,
                devices = 0:3, queries = "points", brute = FALSE))
wanted <- strsplit(Sys.getenv("KDEGPU_LARGE", paste(names(shapes), collapse = ",")), ",")[[1L]]
rows <- list()
for (name in intersect(wanted, names(shapes))) {
  s <- shapes[[name]]
  devices <- if (is.null(s$devices)) 0L else s$devices
  options(kdegpu.devices = devices)
  set.seed(1)
  t_data <- system.time({
    x <- if (identical(s$queries, "points")) {
      sample(kde_gpu(matrix(0, 2L, s$d), H = diag(s$d), precision = "double"), s$n)
    } else {
      matrix(rnorm(s$n * s$d), ncol = s$d)
    }
    q <- if (!identical(s$queries, "points")) {
      matrix(rnorm(s$n * s$d), ncol = s$d)
    } else if (is.null(s$m)) {
      x
    } else {
      x[seq_len(s$m), , drop = FALSE]
    }
  })[["elapsed"]]
  m <- nrow(q)
  cat(sprintf("%s: data %.1f s\n", name, t_data))
  t_fit <- system.time(fit <- kde_gpu(x, precision = s$precision))[["elapsed"]]
  cat(sprintf("%s: fit %.1f s\n", name, t_fit))
  brute <- fit
  if (!isFALSE(s$brute)) {
    old <- options(kdegpu.spatial = FALSE)
    brute <- kde_gpu(x, precision = s$precision)
    options(old)
  }
  head_q <- q[seq_len(s$slice), , drop = FALSE]
  t_slice <- system.time(full <- predict(brute, head_q, log = TRUE, tolerance = 0))[["elapsed"]]
  rm(brute)
  invisible(gc())
  cat(sprintf("%s: full sum of %.0e queries %.1f s\n", name, s$slice, t_slice))
  t_pruned <- if (s$reps > 1L) {
    median_seconds(function() predict(fit, q), s$reps)
  } else {
    system.time(predict(fit, q))[["elapsed"]]
  }
  share <- kdegpu:::pairs_share(fit) # summary() would also summarise the data: minutes at 1e9
  pruned <- predict(fit, head_q, log = TRUE)
  t_full <- t_slice * m / s$slice
  rows[[length(rows) + 1L]] <- data.frame(
    d = s$d, n = s$n, m = m, gpus = length(devices), precision = s$precision, fit_s = t_fit,
    full_s_scaled = t_full, full_slice = s$slice, pruned_s = t_pruned,
    speedup = t_full / t_pruned, pairs_share = share,
    max_rel_diff = max(abs(expm1(pruned - full))), device = info$gpus$name[[1L]])
  cat(sprintf("d=%d n=%.0e m=%.0e %-6s fit %.1f s | full %.1f s (%.0e queries %.2f s, scaled) | pruned %.2f s | %.1fx | pairs %.4f | max rel diff %.1e\n",
              s$d, s$n, m, s$precision, t_fit, t_full, s$slice, t_slice, t_pruned,
              t_full / t_pruned, share, max(abs(expm1(pruned - full)))))
  rm(x, q, fit)
  options(kdegpu.devices = NULL)
  invisible(gc())
}
write_bench_csv(do.call(rbind, rows), out_csv)
cat("wrote", out_csv, "\n")
