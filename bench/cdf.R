# The CDF (predict(type = "cdf")) of a CUDA fit, summed on the GPU, against
# the CPU's sums of the same fit, 1-D Gaussian and 1-D Epanechnikov (one
# reflecting bound: two images), 3-D Gaussian with a diagonal H; n = 1e6.
# The CPU's time is measured on fewer queries and scaled (it is linear in
# them).
#
#   Rscript bench/cdf.R [out.csv]      (default inst/benchmarks/cdf.csv)
suppressPackageStartupMessages(library(kdegpu))
source("bench/timing.R")
args <- commandArgs(trailingOnly = TRUE)
out_csv <- if (length(args)) args[[1L]] else "inst/benchmarks/cdf.csv"
info <- kdegpu_info()
if (nrow(info$gpus) == 0L) stop("bench/cdf.R needs a usable GPU")
options(kdegpu.devices = 0)
n <- 1e6
m_gpu <- 1e4
m_cpu <- 100
set.seed(1)
rows <- list()
shape <- function(name, x, q, ...) {
  gpu <- kde_gpu(x, backend = "cuda", ...)
  cpu <- kde_gpu(x, backend = "cpu", ...)
  t_gpu <- median_seconds(function() predict(gpu, q, type = "cdf"), 3L)
  q_cpu <- q[seq_len(m_cpu), , drop = FALSE]
  t_cpu <- median_seconds(function() predict(cpu, q_cpu, type = "cdf"), 3L) * nrow(q) / m_cpu
  diff <- max(abs(predict(gpu, q_cpu, type = "cdf") - predict(cpu, q_cpu, type = "cdf")))
  rows[[length(rows) + 1L]] <<- data.frame(
    shape = name, n = nrow(x), m = nrow(q), gpu_s = t_gpu, cpu_s_scaled = t_cpu,
    cpu_threads = info$threads, speedup = t_cpu / t_gpu, max_abs_diff = diff,
    device = info$gpus$name[[1L]])
  cat(sprintf("%-28s n=%.0e m=%.0e gpu %.3f s | cpu (%d threads, scaled) %.1f s | %.0fx | max diff %.1e\n",
              name, nrow(x), nrow(q), t_gpu, info$threads, t_cpu, t_cpu / t_gpu, diff))
}
x1 <- matrix(rexp(n))
q1 <- matrix(seq(0, 8, length.out = m_gpu))
shape("1-D gaussian", x1, q1)
shape("1-D epanechnikov, lower = 0", x1, q1, kernel = "epanechnikov", lower = 0)
x3 <- matrix(rnorm(3 * n), ncol = 3)
shape("3-D gaussian, diagonal H", x3, matrix(rnorm(3 * m_gpu), ncol = 3), bw = c(0.1, 0.1, 0.1))
write_bench_csv(do.call(rbind, rows), out_csv)
cat("wrote", out_csv, "\n")
