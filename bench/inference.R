# The inferential tools at the sizes issue 31 names, on the GPU (or the
# CPU at small n): kde_test() with n1 = n2 in 3-D (H by its default,
# ks::kde.test's plug-in), a conditional density f(y | x) and CDF F(y | x)
# at n points in 2-D for 1e4 queries, conditional quantiles, and
# kde_classifier()'s posteriors; where ks is installed, kde_test() and
# kde_classifier() beside ks::kde.test() and ks::kda() at n = 5000.
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
H <- attr(bw_plugin(x1[seq_len(min(n, 1e4)), ], backend = backend), "H")
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
tp <- median_seconds(function() predict(cl, x2[seq_len(min(n, 1e4)), ], type = "posterior"), 3L)
record("kde_classifier 3-D fit", n, t, "two groups, plug-in H each")
record("kde_classifier posteriors", n, tp, "1e4 queries")
# Beside ks, at a size it runs (n = 5000 per sample or group, 3-D, its
# exact sums: binned = FALSE), with the same bandwidths: ks's time, then
# kdegpu's on this backend, and how far the answers agree.
if (requireNamespace("ks", quietly = TRUE)) {
  nk <- 5000
  k1 <- x1[seq_len(nk), ]
  k2 <- x2[seq_len(nk), ]
  H1 <- ks::Hpi.kfe(k1, deriv.order = 0)
  H2 <- ks::Hpi.kfe(k2, deriv.order = 0)
  t_ks <- median_seconds(function() ref <<- ks::kde.test(k1, k2, H1 = H1, H2 = H2,
                                                         binned = FALSE), 3L)
  t_us <- median_seconds(function() got <<- kde_test(k1, k2, H1 = H1, H2 = H2,
                                                     backend = backend), 3L)
  record("ks::kde.test, 3-D", nk, t_ks, "binned = FALSE, H: ks::Hpi.kfe")
  record("kde_test, same H", nk, t_us,
         sprintf("%.1fx ks; statistic T within %.1e of ks's", t_ks / t_us,
                 abs(got$estimate[["T"]] / ref$Tstat - 1)))
  g <- groups[seq_len(nk)]
  Hs <- lapply(levels(g), function(l) ks::Hpi(k1[g == l, ]))
  prior <- as.vector(table(g)) / nk
  t_ks <- median_seconds(function() ref <<- ks::kda(k1, g, Hs = do.call(rbind, Hs),
                                                    prior.prob = prior, eval.points = k2,
                                                    binned = FALSE), 3L)
  t_us <- median_seconds(function() got <<- predict(kde_classifier(k1, g, H = Hs, prior = prior,
                                                                   backend = backend), k2), 3L)
  record("ks::kda, 3-D, two groups", nk, t_ks,
         sprintf("binned = FALSE, H: ks::Hpi per group, the same prior; %d queries", nk))
  # where the two disagree, which one a plain-R sum sides with
  differ <- which(as.character(got) != as.character(ref$x.group.estimate))
  plain <- vapply(seq_along(Hs), function(k) {
    xk <- k1[g == levels(g)[k], , drop = FALSE]
    Hi <- solve(Hs[[k]])
    prior[k] * apply(k2[differ, , drop = FALSE], 1L, function(e) {
      D <- sweep(xk, 2L, e)
      mean(exp(-0.5 * rowSums((D %*% Hi) * D)))
    }) / sqrt(det(2 * pi * Hs[[k]]))
  }, numeric(length(differ)))
  plain_class <- levels(g)[max.col(matrix(plain, length(differ)))]
  record("kde_classifier, same H", nk, t_us,
         sprintf("%.1fx ks; classes agree on %.2f%% of queries; where not, a plain-R sum sides with kdegpu in %d of %d",
                 t_ks / t_us, 100 * (1 - length(differ) / nk),
                 sum(plain_class == as.character(got[differ])), length(differ)))
}
results <- do.call(rbind, rows)
results$device <- device
write_bench_csv(results, out_csv)
