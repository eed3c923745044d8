# The CDF and the sampler, one build against another on the same card in
# one run: the installed kdegpu, or the one in AB_LIB; AB_LABEL names the
# build in the output rows ("label,what,median seconds of 5").
#   AB_LABEL=new Rscript bench/engines_ab.R
#   AB_LABEL=old AB_LIB=/tmp/lib2 Rscript bench/engines_ab.R
# inst/benchmarks/engines-ab.csv: two rounds of each (one H200), the device
# model's engines (642b2f4) against their own uploads on the first GPU
# (9490eee).
lib <- Sys.getenv("AB_LIB")
if (nzchar(lib)) .libPaths(c(lib, .libPaths()))
suppressPackageStartupMessages(library(kdegpu))
source("bench/timing.R")
options(kdegpu.devices = 0)
set.seed(1)
n <- 1e6
x1 <- rexp(n); q1 <- seq(0, 8, length.out = 1e4)
x3 <- matrix(rnorm(3 * n), ncol = 3); q3 <- matrix(rnorm(3e4), ncol = 3)
g1 <- kde_gpu(x1, backend = "cuda"); e1 <- kde_gpu(x1, kernel = "epanechnikov", lower = 0, backend = "cuda")
g3 <- kde_gpu(x3, bw = c(0.1, 0.1, 0.1), backend = "cuda")
invisible(predict(g1, 1, type = "cdf")); invisible(predict(e1, 1, type = "cdf")); invisible(predict(g3, q3[1, , drop = FALSE], type = "cdf"))
row <- function(what, f) cat(sprintf("%s,%s,%.4f\n", Sys.getenv("AB_LABEL"), what, median_seconds(f, 5L)))
row("cdf 1-D gaussian m=1e4", function() predict(g1, q1, type = "cdf"))
row("cdf 1-D epanechnikov lower=0 m=1e4", function() predict(e1, q1, type = "cdf"))
row("cdf 3-D gaussian m=1e4", function() predict(g3, q3, type = "cdf"))
row("cdf 1-D m=1", function() predict(g1, 2, type = "cdf"))
row("quantile 1-D 3 probs", function() quantile(g1, c(0.1, 0.5, 0.9)))
row("sample 1-D 1e6", function() sample(g1, 1e6))
row("sample 3-D 1e6", function() sample(g3, 1e6))
