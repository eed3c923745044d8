# CPU benchmark: exact evaluation of n training x m query points.
#
#   Rscript bench/cpu.R            (after R CMD INSTALL .)
#
# Prints, measured in this run on this machine: kdegpu's CPU backend against
# plain vectorised base R and ks::kde(binned = FALSE) at n = m = 4000, d = 2,
# Gaussian, full H (medians and ratios); time and peak R memory against n;
# and 1-D grids against stats::density and KernSmooth::bkde.
# Writes the numbers to inst/benchmarks/cpu.csv when run from the source tree,
# then runs bench/derivatives.R into derivatives-cpu.csv
# (KDEGPU_BENCH_DERIVATIVES=0 skips it) and bench/shapes.R (few, sparse,
# clustered and GPS-like queries) into a temporary shapes-cpu.csv, marking
# the rows that regressed against inst/benchmarks/shapes.csv
# (KDEGPU_BENCH_SHAPES=0 skips it).
suppressPackageStartupMessages(library(kdegpu))

source("bench/timing.R")

# Exact Gaussian KDE in plain vectorised base R: whiten once, then sum
# exp(-|z_q - z_x|^2 / 2) over chunks of queries with outer(), so the
# chunk x n matrix fits in memory.
base_r_log_density <- function(x, q, H, chunk = 500L) {
  R <- chol(H)
  R_inv <- backsolve(R, diag(ncol(x)))
  zx <- x %*% R_inv
  zq <- q %*% R_inv
  log_const <- -ncol(x) / 2 * log(2 * pi) - sum(log(diag(R))) - log(nrow(x))
  out <- numeric(nrow(q))
  for (rows in split(seq_len(nrow(q)), ceiling(seq_len(nrow(q)) / chunk))) {
    d2 <- 0
    for (k in seq_len(ncol(x))) d2 <- d2 + outer(zq[rows, k], zx[, k], "-")^2
    out[rows] <- log(rowSums(exp(-0.5 * d2))) + log_const
  }
  out
}

set.seed(42)
n <- 4000L
d <- 2L
x <- matrix(rnorm(n * d), n, d) %*% matrix(c(1, 0.6, 0, 0.8), 2)
q <- x[sample.int(n), , drop = FALSE]
H <- n^(-2 / (d + 4)) * cov(x)
fit <- kde_gpu(x, H = H, backend = "cpu")

check <- max(abs(predict(fit, q, log = TRUE) - base_r_log_density(x, q, H)))
stopifnot(check < 1e-9)

times <- c(kdegpu_cpu = median_seconds(function() predict(fit, q)),
           base_r = median_seconds(function() base_r_log_density(x, q, H), reps = 3L))
if (requireNamespace("ks", quietly = TRUE)) {
  times[["ks_kde_exact"]] <- median_seconds(function() {
    ks::kde(x, H = H, eval.points = q, binned = FALSE)
  }, reps = 3L)
}

info <- kdegpu_info()
cat(sprintf("\nkdegpu CPU benchmark: %s, %d OpenMP thread(s), R %s\n",
            Sys.info()[["machine"]], info$threads, getRversion()))
cat(sprintf("Exact Gaussian KDE, full H, n = m = %d, d = %d (max |log f difference| vs base R: %.1e)\n\n",
            n, d, check))
table1 <- data.frame(
  method = names(times),
  median_s = signif(times, 3),
  pairs_per_s = signif(n * n / times, 3),
  times_slower_than_kdegpu = round(times / times[["kdegpu_cpu"]], 1),
  row.names = NULL
)
print(table1, row.names = FALSE)

# Peak R memory of an evaluation, in MB: gc()'s "max used" after a reset.
peak_mb <- function(f) {
  invisible(gc(reset = TRUE))
  before <- sum(gc()[, 2L])
  f()
  sum(gc()[, 6L]) - before
}

# Time and peak memory against n (n = m, d = 2): kdegpu up to 1e5, the
# base-R and ks implementations while they take under ~10 s.
scaling <- list()
for (size in c(1e3, 3e3, 1e4, 3e4, 1e5)) {
  xs <- matrix(rnorm(size * d), size, d)
  Hs <- size^(-2 / (d + 4)) * cov(xs)
  f <- kde_gpu(xs, H = Hs, backend = "cpu")
  reps <- if (size >= 3e4) 1L else 3L
  add <- function(method, fn) {
    scaling[[length(scaling) + 1L]] <<- data.frame(
      method = method, n = size, m = size,
      median_s = signif(median_seconds(fn, reps), 3), peak_mb = signif(peak_mb(fn), 3))
  }
  add("kdegpu_cpu", function() predict(f, xs))
  if (size <= 1e4) add("base_r", function() base_r_log_density(xs, xs, Hs))
  if (size <= 1e4 && requireNamespace("ks", quietly = TRUE)) {
    add("ks_kde_exact", function() ks::kde(xs, H = Hs, eval.points = xs, binned = FALSE))
  }
}
scaling <- do.call(rbind, scaling)
cat("\nTime and peak R memory against n (n = m, d = 2, Gaussian, full H):\n")
print(scaling, row.names = FALSE)

# 1-D densities on a 512-point grid: kdegpu (exact) against the binned
# approximations of stats::density and KernSmooth::bkde.
grid_rows <- list()
for (size in c(1e3, 1e4, 1e5, 1e6)) {
  x1 <- rnorm(size)
  bw <- bw.nrd0(x1)
  grid <- seq(min(x1) - 3 * bw, max(x1) + 3 * bw, length.out = 512L)
  f1 <- kde_gpu(x1, bw = bw, backend = "cpu")
  add <- function(method, fn) {
    grid_rows[[length(grid_rows) + 1L]] <<- data.frame(
      method = method, n = size, m = 512, median_s = signif(median_seconds(fn, 5L), 3))
  }
  add("kdegpu_cpu (exact)", function() predict(f1, grid))
  add("stats::density (binned, FFT)", function() density(x1, bw = bw, n = 512L))
  if (requireNamespace("KernSmooth", quietly = TRUE)) {
    add("KernSmooth::bkde (binned)", function() KernSmooth::bkde(x1, bandwidth = bw, gridsize = 512L))
  }
}
grid_rows <- do.call(rbind, grid_rows)
cat("\n1-D density on a 512-point grid (Gaussian, bw.nrd0):\n")
print(grid_rows, row.names = FALSE)

if (dir.exists("inst/benchmarks")) {
  stamp <- data.frame(machine = Sys.info()[["machine"]], threads = info$threads,
                      date = format(Sys.Date()), commit = bench_commit(), r_version = as.character(getRversion()),
                      kdegpu_version = as.character(packageVersion("kdegpu")))
  write.csv(cbind(stamp, rbind(
    data.frame(kind = "comparison", method = table1$method, n = n, m = n, d = d,
               median_s = table1$median_s, peak_mb = NA),
    data.frame(kind = "scaling", method = scaling$method, n = scaling$n, m = scaling$m, d = d,
               median_s = scaling$median_s, peak_mb = scaling$peak_mb),
    data.frame(kind = "grid_1d", method = grid_rows$method, n = grid_rows$n, m = grid_rows$m,
               d = 1L, median_s = grid_rows$median_s, peak_mb = NA))),
    "inst/benchmarks/cpu.csv", row.names = FALSE)
  cat("\nwrote inst/benchmarks/cpu.csv\n")
}
run_derivatives_bench(if (dir.exists("inst/benchmarks")) "inst/benchmarks/cpu.csv" else
                        file.path(tempdir(), "cpu.csv"), "derivatives-cpu.csv")
run_shapes_bench(file.path(tempdir(), "cpu.csv"), "shapes-cpu.csv", "cpu")
