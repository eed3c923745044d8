# Single-precision sums at n = 1e8 (d = 3, standard normal data, Gaussian,
# Scott's H; the same data and first 1e5 queries as bench/prune_large.R's
# s3e8 row): the default (skipping) evaluation and the full sum
# (tolerance = 0), each against a double-precision full sum. Prints the
# largest and quantiles of the relative error of the density, and the
# queries where the two single evaluations differ most. One GPU, about
# 2.5 minutes on an H100.
#
#   Rscript bench/single_large_sums.R
suppressPackageStartupMessages(library(kdegpu))
info <- kdegpu_info()
if (nrow(info$gpus) == 0L) stop("bench/single_large_sums.R needs a usable GPU")
options(kdegpu.devices = 0)
set.seed(1)
n <- 1e8
d <- 3
x <- matrix(rnorm(n * d), ncol = d)
q <- matrix(rnorm(n * d), ncol = d)[seq_len(1e5), , drop = FALSE]
invisible(gc())
fit <- kde_gpu(x, precision = "single")
skipping <- predict(fit, q, log = TRUE)
rm(fit)
old <- options(kdegpu.spatial = FALSE)
brute <- kde_gpu(x, precision = "single")
full <- predict(brute, q, log = TRUE, tolerance = 0)
rm(brute)
options(old)
reference <- predict(kde_gpu(x, precision = "double"), q, log = TRUE, tolerance = 0)
err_skipping <- abs(expm1(skipping - reference))
err_full <- abs(expm1(full - reference))
cat(sprintf("%s, commit %s: relative error against double, max: skipping %.3g, full %.3g\n",
            info$gpus$name[1], Sys.getenv("KDEGPU_COMMIT", "?"),
            max(err_skipping), max(err_full)))
cat("quantiles 0.5, 0.99, 0.999: skipping", signif(quantile(err_skipping, c(.5, .99, .999)), 3),
    "; full", signif(quantile(err_full, c(.5, .99, .999)), 3), "\n")
for (i in head(order(-abs(skipping - full)), 5))
  cat(sprintf("query |q| = %.2f, log f = %.2f: skipping %.3g, full %.3g\n",
              sqrt(sum(q[i, ]^2)), reference[i], err_skipping[i], err_full[i]))
