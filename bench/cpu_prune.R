# Spatial tiles on the CPU at the issue's shape, next to scikit-learn:
#
#   Rscript bench/cpu_prune.R [output.csv]   (default inst/benchmarks/cpu-prune.csv)
#
# n = 1e6 standard normal training points in 2-D, the Gaussian with an
# isotropic bw = 0.1 (Scott's factor n^(-1/6); sklearn's `bandwidth` is the
# same number for the Gaussian), double precision, every thread allowed.
# Pruned predict() at m = 1e6 queries (default tolerance and 1e-4), one
# timed run each (minutes on 2 cores). The full sum (tolerance = 0, every tile visited) costs exactly m
# times a query's n terms, so it is timed once on the first M_FULL = 1e5
# queries and scaled by m / M_FULL (its rate is flat in m; say so when
# quoting it). scikit-learn 1.2's KernelDensity (kd_tree, atol = 0, rtol =
# the same guarantee, one thread as it runs) on the same data and the first
# M_SK queries; its answers are checked against the exact sum (the largest
# relative error of the density, and the worst log-density).
# KDEGPU_BENCH_N, M_FULL, M_SK override the sizes; PYTHON the interpreter
# (default /usr/bin/python3: Debian's python3-sklearn).
suppressPackageStartupMessages(library(kdegpu))
args <- commandArgs(trailingOnly = TRUE)
out_csv <- if (length(args)) args[[1L]] else "inst/benchmarks/cpu-prune.csv"
source("bench/timing.R")
n <- as.numeric(Sys.getenv("KDEGPU_BENCH_N", "1e6"))
m_full <- as.numeric(Sys.getenv("M_FULL", "1e5"))
m_sk <- as.numeric(Sys.getenv("M_SK", "2e3"))
python <- Sys.getenv("PYTHON", "/usr/bin/python3")
info <- kdegpu_info()
bw <- n^(-1 / 6)

set.seed(1)
x <- matrix(rnorm(2 * n), n)
q <- matrix(rnorm(2 * n), n)
rows <- list()
record <- function(method, m, seconds, scaled_from = NA, max_rel = NA, worst_log = NA) {
  rows[[length(rows) + 1L]] <<- data.frame(method = method, n = n, m = m, seconds = seconds,
                                            timed_on_m = scaled_from, max_rel_err = max_rel,
                                            worst_log_err = worst_log, pairs_share = NA)
  cat(sprintf("%-34s m=%-7.0e %9.2f s%s%s\n", method, m, seconds,
              if (is.na(scaled_from)) "" else sprintf(" (timed on %.0e queries, scaled)", scaled_from),
              if (is.na(max_rel)) "" else sprintf("  max rel err %.1e, worst |dlog| %.1e",
                                                   max_rel, worst_log)))
}

fit <- kde_gpu(x, bw = bw, backend = "cpu")
old <- options(kdegpu.spatial = FALSE)
brute <- kde_gpu(x, bw = bw, backend = "cpu")
options(old)
head_q <- q[seq_len(m_full), , drop = FALSE]
t_full <- system.time(exact <- predict(brute, head_q, log = TRUE, tolerance = 0))[["elapsed"]]
record("kdegpu full (tolerance = 0)", n, t_full * n / m_full, m_full)
errors <- function(log_density, reference) {
  keep <- is.finite(reference)
  c(max(abs(expm1(log_density[keep] - reference[keep]))),
    max(abs(log_density[keep] - reference[keep])))
}
for (tol in list(NULL, 1e-4)) {
  label <- if (is.null(tol)) "kdegpu pruned (default tolerance)" else sprintf("kdegpu pruned (tolerance = %g)", tol)
  # one timed run: minutes each on 2 cores, with no first-call cost to skip
  s <- system.time(predict(fit, q, tolerance = tol))[["elapsed"]]
  share <- summary(fit)$pairs_share
  e <- errors(predict(fit, head_q, log = TRUE, tolerance = tol), exact)
  record(label, n, s, NA, e[1], e[2])
  rows[[length(rows)]]$pairs_share <- share
  cat(sprintf("  share of pairs evaluated: %.4f\n", share))
}

folder <- tempfile("kdegpu-sklearn")
dir.create(folder)
utils::write.table(x, file.path(folder, "train.csv"), sep = ",", row.names = FALSE,
                   col.names = FALSE)
utils::write.table(q[seq_len(m_sk), , drop = FALSE], file.path(folder, "query.csv"), sep = ",",
                   row.names = FALSE, col.names = FALSE)
rtols <- c("1e-12", "1e-4")
status <- system2(python, c("bench/sklearn_tree.py", folder, format(bw, digits = 17), rtols))
if (status == 0) {
  times <- utils::read.csv(file.path(folder, "sklearn_times.csv"))
  for (i in seq_len(nrow(times))) {
    ld <- scan(file.path(folder, sprintf("sklearn_rtol%s.csv", rtols[i])), quiet = TRUE)
    e <- errors(ld, exact[seq_len(m_sk)])
    record(sprintf("sklearn kd_tree (rtol = %s, 1 thread)", rtols[i]), n,
           times$score_s[i] * n / m_sk, m_sk, e[1], e[2])
  }
} else {
  cat("scikit-learn did not run (", python, "); its rows are left out\n")
}

res <- do.call(rbind, rows)
res$d <- 2L
res$threads <- info$threads
res$machine <- sprintf("%s, %d cores", R.version$arch, parallel::detectCores())
res$date <- format(Sys.Date())
res$commit <- bench_commit()
utils::write.csv(res, out_csv, row.names = FALSE)
cat("wrote", out_csv, "\n")
