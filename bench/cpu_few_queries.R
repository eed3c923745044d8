# Few queries against a large CPU fit (n = 1e6, Scott's H, 2 threads): the
# default and tolerance = 0, median seconds of 7, for one build against
# another on the same machine in one run. AB_LIB: the library of the build
# (default: the installed one); AB_LABEL names it in the rows
# ("label,d,m,default s,tolerance 0 s").
#   AB_LABEL=model AB_LIB=lib-new Rscript bench/cpu_few_queries.R
#   AB_LABEL=per-call AB_LIB=lib-old Rscript bench/cpu_few_queries.R
lib <- Sys.getenv("AB_LIB"); if (nzchar(lib)) .libPaths(c(lib, .libPaths()))
suppressPackageStartupMessages(library(kdegpu)); source("bench/timing.R")
options(kdegpu.threads = 2)
set.seed(1)
for (d in c(2L, 3L)) {
  x <- matrix(rnorm(1e6 * d), ncol = d); f <- kde_gpu(x, backend = "cpu")
  q <- matrix(rnorm(1000 * d), ncol = d); invisible(predict(f, q[1, , drop = FALSE]))
  for (m in c(1L, 10L, 100L, 1000L)) {
    qm <- q[seq_len(m), , drop = FALSE]
    t_def <- median_seconds(function() predict(f, qm), 7L)
    t_0 <- median_seconds(function() predict(f, qm, tolerance = 0), 7L)
    cat(sprintf("%s,%d,%d,%.5f,%.5f\n", Sys.getenv("AB_LABEL"), d, m, t_def, t_0))
  }
}
