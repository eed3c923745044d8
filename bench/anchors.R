# What the anchors (src/cuda/pack.cu) cost and buy: the difference
# form's full sum (tolerance = 0) at d = 1, 2, 3 in both precisions, pairs
# per second, and the single-precision error by kind of query on clustered
# data, for the package installed in the library given (run it once per
# library, with and without anchors, on the same card).
#
#   Rscript bench/anchors.R <label> [out.csv]
suppressPackageStartupMessages(library(kdegpu))
args <- commandArgs(trailingOnly = TRUE)
label <- args[[1L]]
out_csv <- if (length(args) >= 2L) args[[2L]] else NULL
source("bench/timing.R")
rows <- list()
n <- 2e6
m <- 5e5
for (d in 1:3) {
  set.seed(d)
  x <- matrix(rnorm(n * d), n, d)
  q <- matrix(rnorm(m * d), m, d)
  for (p in c("single", "double")) {
    fit <- kde_gpu(x, backend = "cuda", precision = p)
    s <- median_seconds(function() predict(fit, q, tolerance = 0), 3L)
    rows[[length(rows) + 1L]] <- data.frame(label = label, what = "speed", d = d,
                                            precision = p, value = n * m / s)
    cat(sprintf("%s d=%d %-6s %.3e pairs/s\n", label, d, p, n * m / s))
  }
}
# clustered (bench/shapes.R's): error of the density by query kind
set.seed(1)
for (d in 2:3) {
  centres <- cbind(as.matrix(expand.grid(200 * (0:4), 200 * (0:3))), matrix(0, 20, d - 2))
  x <- centres[sample.int(20L, 2e5, replace = TRUE), ] + matrix(rnorm(d * 2e5), ncol = d)
  q <- x[sample.int(nrow(x), 2000L), ] + matrix(rnorm(2000 * d, sd = 0.5), 2000, d)
  ref <- predict(kde_gpu(x, bw = 0.25, backend = "cpu"), q, log = TRUE, tolerance = 0)
  for (p in c("single", "double")) {
    got <- predict(kde_gpu(x, bw = 0.25, backend = "cuda", precision = p), q, log = TRUE,
                   tolerance = 0)
    rel <- abs(expm1(got - ref))
    near <- ref > max(ref) - 20
    cat(sprintf("%s clustered d=%d %-6s max rel %.1e  near(20) %.1e  quantiles %s\n", label, d, p,
                max(rel), max(rel[near]),
                paste(sprintf("%.1e", quantile(rel, c(0.5, 0.9, 0.99))), collapse = " ")))
    worst <- order(rel, decreasing = TRUE)[1:3]
    cat(sprintf("   worst: log f %s, rel %s\n", paste(sprintf("%.2f", ref[worst]), collapse = " "),
                paste(sprintf("%.1e", rel[worst]), collapse = " ")))
    rows[[length(rows) + 1L]] <- data.frame(label = label, what = "clustered max rel", d = d,
                                            precision = p, value = max(rel))
  }
}
res <- do.call(rbind, rows)
if (!is.null(out_csv)) write.csv(res, out_csv, row.names = FALSE)
