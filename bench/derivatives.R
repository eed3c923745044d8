# Derivatives benchmark (issue 17): the gradient, the Hessian and the score
# next to the density's time in the same run, mean shift (kde_modes), and
# SD-KDE on the Flash-SD-KDE shape (n = 1e6 training points, 131,072
# queries, d = 16), on the backend this machine has (the GPU when usable).
#
#   Rscript bench/derivatives.R [output.csv]  (default inst/benchmarks/derivatives.csv)
#
# Gaussian kernel, Scott's H, standard normal data. Sizes: n = m = 1e6 on a
# GPU, 2e4 on the CPU (KDEGPU_BENCH_N overrides). First, a correctness line:
# the GPU's gradient and Hessian against the CPU backend's at n = 2e3.
suppressPackageStartupMessages(library(kdegpu))
args <- commandArgs(trailingOnly = TRUE)
out_csv <- if (length(args)) args[[1L]] else "inst/benchmarks/derivatives.csv"
source("bench/timing.R")
info <- kdegpu_info()
gpu <- nrow(info$gpus) > 0L
backend <- if (gpu) "cuda" else "cpu"
device <- if (gpu) info$gpus$name[[1L]] else sprintf("CPU, %d threads", info$threads)
n <- as.numeric(Sys.getenv("KDEGPU_BENCH_N", if (gpu) "1e6" else "2e4"))

rows <- list()
record <- function(task, d, n, m, precision, seconds, relative = NA_real_) {
  rows[[length(rows) + 1L]] <<- data.frame(task = task, d = d, n = n, m = m,
                                            precision = precision, seconds = seconds,
                                            relative_to_density = relative)
  cat(sprintf("%-26s d=%-2d n=%-7.0e m=%-7.0e %-6s %9.3f s %s\n", task, d, n, m, precision,
              seconds, if (is.na(relative)) "" else sprintf("(%.2fx density)", relative)))
}
max_rel <- function(a, b) max(abs(a - b) / pmax(abs(b), 1e-300 + max(abs(b)) * 1e-12))

if (gpu) {
  set.seed(1)
  x <- matrix(rnorm(2e3 * 3), ncol = 3)
  q <- x[1:500, ] + 0.1
  for (precision in c("double", "single")) {
    fg <- kde_gpu(x, backend = "cuda", precision = precision)
    fc <- kde_gpu(x, backend = "cpu")
    cat(sprintf("check %s: gradient %.2e, hessian %.2e, score %.2e (max relative, GPU vs CPU)\n",
                precision,
                max_rel(predict(fg, q, type = "gradient"), predict(fc, q, type = "gradient")),
                max_rel(predict(fg, q, type = "hessian"), predict(fc, q, type = "hessian")),
                max_rel(predict(fg, q, type = "gradient", log = TRUE),
                        predict(fc, q, type = "gradient", log = TRUE))))
  }
}

for (precision in if (gpu) c("single", "double") else "double") {
  set.seed(2)
  x <- matrix(rnorm(n * 3), ncol = 3)
  fit <- kde_gpu(x, backend = backend, precision = precision)
  density <- median_seconds(function() predict(fit, x), reps = 3L)
  record("density", 3L, n, n, precision, density, 1)
  for (type in c("gradient", "hessian")) {
    s <- median_seconds(function() predict(fit, x, type = type), reps = 3L)
    record(type, 3L, n, n, precision, s, s / density)
  }
  s <- median_seconds(function() predict(fit, x, type = "gradient", log = TRUE), reps = 3L)
  record("score", 3L, n, n, precision, s, s / density)
}

# Mean shift from 1e4 starts on the n-point fit (2-D, three clusters).
set.seed(3)
centres <- matrix(c(-3, 0, 3, 0, 3, 0), ncol = 2)
x <- centres[sample(3, n, TRUE), ] + matrix(rnorm(2 * n), ncol = 2)
fit <- kde_gpu(x, backend = backend, precision = "double")
starts <- x[seq_len(min(1e4, n)), ]
s <- system.time(modes <- kde_modes(fit, start = starts))[["elapsed"]]
record(sprintf("kde_modes (%d modes)", nrow(modes$modes)), 2L, n, nrow(starts), "double", s)

# SD-KDE on the Flash-SD-KDE shape: the score at every training point, the
# shifted fit, then the density at the queries.
m_sd <- if (gpu) 131072 else 2000
n_sd <- if (gpu) 1e6 else 2e4
set.seed(4)
x <- matrix(rnorm(n_sd * 16), ncol = 16)
q <- matrix(rnorm(m_sd * 16), ncol = 16)
for (precision in if (gpu) c("single", "double") else "double") {
  s <- system.time({
    fit <- kde_gpu(x, backend = backend, precision = precision, debias = TRUE)
    invisible(predict(fit, q))
  })[["elapsed"]]
  record("SD-KDE fit + predict", 16L, n_sd, m_sd, precision, s)
}

res <- do.call(rbind, rows)
res$backend <- backend
res$device <- device
res$date <- format(Sys.Date())
res$commit <- bench_commit()
utils::write.csv(res, out_csv, row.names = FALSE)
cat("wrote", out_csv, "\n")
