# Derivatives benchmark (issue 17): the gradient, the Hessian and the score
# next to the density's time in the same run, mean shift (kde_modes), and
# SD-KDE on the Flash-SD-KDE shape (n = 1e6 training points, 131,072
# queries, d = 16), on the backend this machine has (the GPU when usable).
#
#   Rscript bench/derivatives.R [output.csv]  (default inst/benchmarks/derivatives.csv)
#
# KDEGPU_BENCH_PARTS picks parts (default all: "checks,sums,modes,sdkde");
# the CSV is rewritten after every row, so a run cut short keeps its rows.
#
# Scott's H, standard normal data; the Gaussian, and at d = 3 also the
# epanechnikov and exponential kernels. Sizes: n = m = 1e6 on a GPU, 2e4
# on the CPU (KDEGPU_BENCH_N overrides). First, correctness lines: the
# GPU's gradient, Hessian and score against the CPU backend's at n = 2e3
# for several kernels in both precisions (max over points of the error
# relative to that point's largest entry; queries clear of the compact
# kernels' edges, where float's rounding may move a term across).
suppressPackageStartupMessages(library(kdegpu))
args <- commandArgs(trailingOnly = TRUE)
out_csv <- if (length(args)) args[[1L]] else "inst/benchmarks/derivatives.csv"
source("bench/timing.R")
info <- kdegpu_info()
gpu <- nrow(info$gpus) > 0L
backend <- if (gpu) "cuda" else "cpu"
device <- if (gpu) info$gpus$name[[1L]] else sprintf("CPU, %d threads", info$threads)
n <- as.numeric(Sys.getenv("KDEGPU_BENCH_N", if (gpu) "1e6" else "2e4"))
# Derivatives run on the first GPU: the density too, so that the ratios
# compare one device with one device (a two-GPU machine would halve the
# density's time only).
if (gpu) options(kdegpu.devices = 0L)
parts <- strsplit(Sys.getenv("KDEGPU_BENCH_PARTS", "checks,sums,modes,sdkde"), ",")[[1L]]

rows <- list()
record <- function(task, d, n, m, precision, seconds, relative = NA_real_) {
  rows[[length(rows) + 1L]] <<- data.frame(task = task, d = d, n = n, m = m,
                                            precision = precision, seconds = seconds,
                                            relative_to_density = relative,
                                            gpus = if (gpu) 1L else 0L)
  write_rows()
  cat(sprintf("%-26s d=%-2d n=%-7.0e m=%-7.0e %-6s %9.3f s %s\n", task, d, n, m, precision,
              seconds, if (is.na(relative)) "" else sprintf("(%.2fx density)", relative)))
}
# the largest error of any point, relative to that point's largest entry
max_rel <- function(a, b) {
  m <- dim(b)[1L]
  a <- matrix(a, m)
  b <- matrix(b, m)
  max(apply(abs(a - b), 1L, max) / pmax(apply(abs(b), 1L, max), 1e-300))
}
clear_of_edges <- function(fit, q, margin = 1e-3) {
  if (fit$kernel %in% c("gaussian", "exponential")) return(q)
  zq <- kdegpu:::whiten(fit, q)
  q[apply(zq, 1L, function(z) all(abs(colSums((t(fit$z) - z)^2) - 1) > margin)), , drop = FALSE]
}

write_rows <- function() {
  res <- do.call(rbind, rows)
  res$backend <- backend
  res$device <- device
  res$date <- format(Sys.Date())
  res$commit <- bench_commit()
  utils::write.csv(res, out_csv, row.names = FALSE)
}

if (gpu && "checks" %in% parts) {
  set.seed(1)
  x <- matrix(rnorm(2e3 * 3), ncol = 3)
  q0 <- x[1:500, ] + 0.1
  for (kernel in c("gaussian", "epanechnikov", "biweight", "cosine", "triangular",
                   "exponential")) {
    fc <- kde_gpu(x, kernel = kernel, backend = "cpu")
    q <- clear_of_edges(fc, q0)
    for (precision in c("double", "single")) {
      fg <- kde_gpu(x, kernel = kernel, backend = "cuda", precision = precision)
      cat(sprintf("check %-12s %-6s: gradient %.2e, hessian %.2e, score %.2e (%d points)\n",
                  kernel, precision,
                  max_rel(predict(fg, q, type = "gradient"), predict(fc, q, type = "gradient")),
                  max_rel(predict(fg, q, type = "hessian"), predict(fc, q, type = "hessian")),
                  max_rel(predict(fg, q, type = "gradient", log = TRUE),
                          predict(fc, q, type = "gradient", log = TRUE)), nrow(q)))
    }
  }
}

for (precision in if ("sums" %in% parts) { if (gpu) c("single", "double") else "double" }) {
  set.seed(2)
  x <- matrix(rnorm(n * 3), ncol = 3)
  for (kernel in c("gaussian", "epanechnikov", "exponential")) {
    tag <- if (kernel == "gaussian") "" else sprintf(" (%s)", kernel)
    fit <- kde_gpu(x, kernel = kernel, backend = backend, precision = precision)
    density <- median_seconds(function() predict(fit, x), reps = 3L)
    record(paste0("density", tag), 3L, n, n, precision, density, 1)
    for (type in c("gradient", "hessian")) {
      s <- median_seconds(function() predict(fit, x, type = type), reps = 3L)
      record(paste0(type, tag), 3L, n, n, precision, s, s / density)
    }
    s <- median_seconds(function() predict(fit, x, type = "gradient", log = TRUE), reps = 3L)
    record(paste0("score", tag), 3L, n, n, precision, s, s / density)
  }
}

# Mean shift from 1e4 starts on the n-point fit (2-D, three clusters).
if ("modes" %in% parts) {
set.seed(3)
centres <- matrix(c(-3, 0, 3, 0, 3, 0), ncol = 2)
x <- centres[sample(3, n, TRUE), ] + matrix(rnorm(2 * n), ncol = 2)
fit <- kde_gpu(x, backend = backend, precision = "double")
starts <- x[seq_len(min(1e4, n)), ]
s <- system.time(modes <- kde_modes(fit, start = starts))[["elapsed"]]
record(sprintf("kde_modes (%d modes)", nrow(modes$modes)), 2L, n, nrow(starts), "double", s)
}

# SD-KDE on the Flash-SD-KDE shape: the score at every training point, the
# shifted fit, then the density at the queries.
m_sd <- if (gpu) 131072 else 2000
n_sd <- if (gpu) 1e6 else 2e4
set.seed(4)
x <- matrix(rnorm(n_sd * 16), ncol = 16)
q <- matrix(rnorm(m_sd * 16), ncol = 16)
for (precision in if ("sdkde" %in% parts) { if (gpu) c("single", "double") else "double" }) {
  s <- system.time({
    fit <- kde_gpu(x, backend = backend, precision = precision, debias = TRUE)
    invisible(predict(fit, q))
  })[["elapsed"]]
  record("SD-KDE fit + predict", 16L, n_sd, m_sd, precision, s)
}

cat("wrote", out_csv, "\n")
