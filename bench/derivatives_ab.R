# The derivative and moment sums, one build against another on the same
# card in one run: the installed kdegpu, or the one in AB_LIB; AB_LABEL
# names the build in the output rows ("label,what,median seconds of 5").
#   AB_LABEL=new Rscript bench/derivatives_ab.R
#   AB_LABEL=old AB_LIB=/tmp/lib2 Rscript bench/derivatives_ab.R
# AB_DEVICES (e.g. "0,0") sets options(kdegpu.devices); default GPU 0.
# inst/benchmarks/derivatives-ab.csv: six rounds of each (one H200), the
# sums on every device of the model (65582e6) against the first device
# only (b3188ae), and one round on two replicas of GPU 0.
lib <- Sys.getenv("AB_LIB")
if (nzchar(lib)) .libPaths(c(lib, .libPaths()))
suppressPackageStartupMessages(library(kdegpu))
source("bench/timing.R")
devices <- Sys.getenv("AB_DEVICES", "0")
options(kdegpu.devices = as.integer(strsplit(devices, ",")[[1L]]))
set.seed(1)
n <- 1e6
x2 <- matrix(rnorm(2 * n), ncol = 2)
x3 <- matrix(rnorm(3 * n), ncol = 3)
q2 <- x2[sample.int(n, 1e5), ] + 0.05
q3 <- x3[sample.int(n, 1e4), ] + 0.05
g2 <- kde_gpu(x2, backend = "cuda", precision = "single")
g3 <- kde_gpu(x3, backend = "cuda", precision = "double")
e2 <- kde_gpu(x2, kernel = "epanechnikov", backend = "cuda", precision = "single")
invisible(predict(g2, q2[1:10, ], type = "gradient"))
invisible(predict(g3, q3[1:10, ], type = "hessian"))
invisible(predict(e2, q2[1:10, ], type = "gradient"))
label <- paste0(Sys.getenv("AB_LABEL"), if (devices != "0") paste0(" devices=", devices))
row <- function(what, f) cat(sprintf("%s,%s,%.4f\n", label, what, median_seconds(f, 5L)))
row("gradient 2-D gaussian single n=1e6 m=1e5", function() predict(g2, q2, type = "gradient"))
row("gradient 2-D gaussian single n=1e6 m=10", function() predict(g2, q2[1:10, ], type = "gradient"))
row("hessian 3-D gaussian double n=1e6 m=1e4", function() predict(g3, q3, type = "hessian"))
row("gradient 2-D epanechnikov single n=1e6 m=1e5", function() predict(e2, q2, type = "gradient"))
row("bw_plugin 2-D n=1e5 (moment sums)", function() bw_plugin(x2[1:1e5, ], backend = "cuda"))
