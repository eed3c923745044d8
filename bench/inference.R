# The inferential tools at the sizes issue 31 names, on the GPU (or the
# CPU at small n): kde_test() with n1 = n2 in 3-D (H by its default,
# ks::kde.test's plug-in), a conditional density f(y | x) and CDF F(y | x)
# at n points in 2-D for 1e4 queries, conditional quantiles, and
# kde_classifier()'s posteriors.
#
#   Rscript bench/inference.R [output.csv] [n]   (default inst/benchmarks/inference.csv, 1e6)
suppressPackageStartupMessages(library(kdegpu))
args <- commandArgs(trailingOnly = TRUE)
out_csv <- if (length(args) >= 1L) args[[1L]] else "inst/benchmarks/inference.csv"
n <- if (length(args) >= 2L) as.numeric(args[[2L]]) else 1e6
info <- kdegpu_info()
gpu <- nrow(info$gpus) > 0L
backend <- if (gpu) "cuda" else "cpu"
source("bench/timing.R")
device <- if (gpu) info$gpus$name[[1L]] else
  sprintf("CPU, %d threads", getOption("kdegpu.threads", parallel::detectCores()))
rows <- list()
record <- function(task, n, seconds, detail) {
  rows[[length(rows) + 1L]] <<- data.frame(task = task, n = n, seconds = seconds,
                                            detail = detail)
  cat(sprintf("%-28s n=%-7.0e %8.3f s  %s\n", task, n, seconds, detail))
}
set.seed(1)
x1 <- matrix(rnorm(3 * n), n)
x2 <- matrix(rnorm(3 * n), n) %*% diag(c(1, 1, 1.02))
# medians of 3 (after two untimed runs: median_seconds)
t <- median_seconds(function() test <<- kde_test(x1, x2, backend = backend), 3L)
record("kde_test 3-D (H: plug-in)", n, t,
       sprintf("statistic %.4g, p-value %.3g", test$statistic, test$p.value))
H <- attr(bw_plugin(x1[1:1e4, ], backend = backend), "H")
t <- median_seconds(function() test <<- kde_test(x1, x2, H1 = H, H2 = H, backend = backend), 3L)
record("kde_test 3-D (H given)", n, t,
       sprintf("statistic %.4g, p-value %.3g", test$statistic, test$p.value))
y <- cbind(x = x1[, 1], y = x1[, 2] + x1[, 1]^2)
fit <- kde_gpu(y, backend = backend, precision = "single")
q <- cbind(x = rep(c(-1, 0, 1), length.out = 1e4), y = seq(-3, 5, length.out = 1e4))
t <- median_seconds(function() predict(fit, q, given = "x"), 3L)
record("conditional f(y | x), 2-D", n, t, "1e4 queries, single, Scott's H")
t <- median_seconds(function() predict(fit, q, type = "cdf", given = "x"), 3L)
record("conditional F(y | x), 2-D", n, t, "1e4 queries (sums in double)")
at <- data.frame(x = seq(-2, 2, length.out = 100))
t <- system.time(qs <- quantile(fit, c(0.1, 0.5, 0.9), given = at))[["elapsed"]]
record("conditional quantiles, 2-D", n, t,
       sprintf("100 points x 3 probabilities; median at x = 0: %.4f", qs[50, 2]))
groups <- factor(ifelse(x1[, 1] + 0.3 * x1[, 2] > 0, "a", "b"))
t <- system.time(cl <- kde_classifier(x1, groups, backend = backend))[["elapsed"]]
tp <- median_seconds(function() predict(cl, x2[1:1e4, ], type = "posterior"), 3L)
record("kde_classifier 3-D fit", n, t, "two groups, plug-in H each")
record("kde_classifier posteriors", n, tp, "1e4 queries")
results <- do.call(rbind, rows)
results$device <- device
write_bench_csv(results, out_csv)
