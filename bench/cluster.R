# Cluster benchmark (CPU backend):
#
#   Rscript bench/cluster.R
#
# Time of predict() against the number of local PSOCK workers (1, 2, 4 up to
# the cores), split by queries and by training shards, each worker with one
# OpenMP thread so that workers, not threads, do the parallel work; the
# single-process time with one thread is the baseline measured in the same
# run. Writes inst/benchmarks/cluster.csv from the source tree.
suppressPackageStartupMessages(library(kdegpu))
source("bench/timing.R")
set.seed(1)
n <- 40000L
m <- 20000L
x <- matrix(rnorm(n * 2), n, 2)
q <- matrix(rnorm(m * 2), m, 2)
fit <- kde_gpu(x, backend = "cpu")

old <- options(kdegpu.threads = 1L)
rows <- list(data.frame(workers = 0L, split = "none (one process, one thread)",
                        seconds = median_seconds(function() predict(fit, q), reps = 3L)))
cores <- parallel::detectCores()
for (workers in unique(pmin(c(1L, 2L, 4L, 8L), cores))) {
  cl <- parallel::makePSOCKcluster(workers)
  parallel::clusterEvalQ(cl, options(kdegpu.threads = 1L))
  for (split in c("queries", "training")) {
    rows[[length(rows) + 1L]] <- data.frame(
      workers = workers, split = split,
      seconds = median_seconds(function() predict(fit, q, cluster = cl, split = split),
                               reps = 3L))
  }
  parallel::stopCluster(cl)
}
options(old)
results <- do.call(rbind, rows)
results$speedup <- round(results$seconds[1L] / results$seconds, 2)
cat(sprintf("predict() of m = %d queries against n = %d points (d = 2, Gaussian), %d cores\n",
            m, n, cores))
print(results, row.names = FALSE)
if (dir.exists("inst/benchmarks")) {
  results$date <- format(Sys.Date())
  results$commit <- bench_commit()
  results$cores <- cores
  write.csv(results, "inst/benchmarks/cluster.csv", row.names = FALSE)
}
