# CPU benchmark: exact evaluation of n training x m query points.
#
#   Rscript bench/cpu.R            (after R CMD INSTALL .)
#
# Prints, measured in this run on this machine: kdegpu's CPU backend against
# plain vectorised base R and ks::kde(binned = FALSE) at n = m = 4000, d = 2,
# Gaussian, full H (medians and ratios), then kdegpu's time against n.
# Writes the numbers to inst/benchmarks/cpu.csv when run from the source tree.
suppressPackageStartupMessages(library(kdegpu))

median_seconds <- function(expr_fn, reps = 5L) {
  expr_fn() # warm-up
  median(vapply(seq_len(reps), function(i) system.time(expr_fn())[["elapsed"]], 0))
}

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

sizes <- c(1e3, 3e3, 1e4, 3e4, 1e5)
scaling <- do.call(rbind, lapply(sizes, function(size) {
  xs <- matrix(rnorm(size * d), size, d)
  f <- kde_gpu(xs, backend = "cpu")
  t <- median_seconds(function() predict(f, xs), reps = if (size >= 3e4) 1L else 3L)
  data.frame(n = size, m = size, median_s = signif(t, 3), pairs_per_s = signif(size^2 / t, 3))
}))
cat("\nkdegpu CPU time against n (n = m, d = 2, Gaussian, Scott's full H):\n")
print(scaling, row.names = FALSE)

if (dir.exists("inst/benchmarks")) {
  stamp <- data.frame(machine = Sys.info()[["machine"]], threads = info$threads,
                      date = format(Sys.Date()), r_version = as.character(getRversion()),
                      kdegpu_version = as.character(packageVersion("kdegpu")))
  write.csv(cbind(stamp, rbind(
    data.frame(kind = "comparison", method = table1$method, n = n, m = n, d = d,
               median_s = table1$median_s),
    data.frame(kind = "scaling", method = "kdegpu_cpu", n = scaling$n, m = scaling$m, d = d,
               median_s = scaling$median_s))),
    "inst/benchmarks/cpu.csv", row.names = FALSE)
  cat("\nwrote inst/benchmarks/cpu.csv\n")
}
