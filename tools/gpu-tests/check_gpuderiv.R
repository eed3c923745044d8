# The GPU derivative sums (branch gpuderiv) on the GPU machine, in one call
# after R CMD INSTALL . (or STEPS=gpuderiv with tools/gpu-session.sh):
#
#   Rscript tools/gpu-tests/check_gpuderiv.R
#
# 1. testthat on tests/testthat/test-derivatives.R, test-modes.R and test-evaluation.R,
#    each failure printed with its message the moment it happens (and each
#    file's counts), so that nothing is lost if a later step stops the run.
# 2. cuda vs cpu at n = 2e5, d = 3, 2000 queries, for every differentiable
#    kernel in both precisions: the gradient, the Hessian and the score
#    (gradient of log f), each point's error relative to its largest entry
#    or to the entries' natural size where that is larger (f / bw, f / bw^2,
#    1 / bw: where terms cancel, the rounding is that of the terms), as the
#    tests measure it. Queries clear of the compact kernels' edges (|t - 1|
#    > 1e-4, some 50 times float's rounding of t; at n = 2e5 the tests'
#    1e-3 would leave few queries) and of the cusps (s > 0.02), where
#    float's rounding of a distance moves a term across a jump. Thresholds:
#    double 1e-10, single 1e-4 (the tests').
# 3. kde_modes() on bench/derivatives.R's three clusters (1e5 points, 2000
#    starts, default tol and merge_tol), cuda (double, then single) vs cpu:
#    the number of modes, the partition (labels equal up to renaming) and
#    the largest distance between the end points.
# 4. Timings as bench/derivatives.R takes them (n = m = 1e6, d = 3, the
#    density, gradient, Hessian and score; the Gaussian, epanechnikov and
#    exponential kernels in single precision, the Gaussian in double), mean
#    shift from 1e4 starts on 1e6 points, SD-KDE on the Flash-SD-KDE shape.
# About 4 minutes on an H100. Each check line ends in ok or FAIL; the last
# line counts the failures.
suppressPackageStartupMessages(library(kdegpu))
info <- kdegpu_info()
if (nrow(info$gpus) == 0L) stop("tools/gpu-tests/check_gpuderiv.R needs a GPU: ", info$cuda_message)
cat(sprintf("device: %s; CPU threads: %d\n", info$gpus$name[[1L]], info$threads))
source("bench/timing.R")
failures <- 0L
verdict <- function(ok) {
  if (!isTRUE(ok)) failures <<- failures + 1L
  if (isTRUE(ok)) "ok" else "FAIL"
}
t_start <- Sys.time()
elapsed <- function() sprintf("[%.0f s]", as.numeric(Sys.time() - t_start, units = "secs"))

# ---- 1. testthat ------------------------------------------------------------
cat("\n1. testthat (failures as they happen)\n")
NowReporter <- R6::R6Class("NowReporter", inherit = testthat::Reporter, public = list(
  counts = NULL,
  start_file = function(filename) {
    self$counts <- c(passed = 0L, failed = 0L, skipped = 0L)
    cat(sprintf("  %s\n", filename))
  },
  add_result = function(context, test, result) {
    if (inherits(result, c("expectation_failure", "expectation_error"))) {
      self$counts[["failed"]] <- self$counts[["failed"]] + 1L
      where <- if (!is.null(result$srcref)) sprintf(" (line %d)", result$srcref[[1L]]) else ""
      cat(sprintf("  FAILED in '%s'%s:\n    %s\n", test, where,
                  gsub("\n", "\n    ", conditionMessage(result))))
      flush(stdout())
    } else if (inherits(result, "expectation_skip")) {
      self$counts[["skipped"]] <- self$counts[["skipped"]] + 1L
    } else if (inherits(result, "expectation_success")) {
      self$counts[["passed"]] <- self$counts[["passed"]] + 1L
    }
  },
  end_file = function() {
    cat(sprintf("    %d passed, %d failed, %d skipped\n", self$counts[["passed"]],
                self$counts[["failed"]], self$counts[["skipped"]]))
  }
))
for (f in c("test-derivatives.R", "test-modes.R", "test-evaluation.R")) {
  reporter <- NowReporter$new()
  testthat::test_file(file.path("tests/testthat", f), reporter = reporter, package = "kdegpu",
                      load_package = "installed", stop_on_failure = FALSE)
  cat(sprintf("testthat %-20s %s %s\n", f, verdict(reporter$counts[["failed"]] == 0L), elapsed()))
}
# a test that changed options and failed before restoring them must not
# change what follows
options(kdegpu.gpu_memory = NULL, kdegpu.tolerance = NULL)

# ---- 2. cuda vs cpu at n = 2e5 ---------------------------------------------------
cat("\n2. cuda vs cpu, n = 2e5, d = 3, 2000 queries (max relative error)\n")
point_err <- function(a, e, floor) {
  m <- dim(e)[1L]
  a <- matrix(a, m)
  e <- matrix(e, m)
  max(apply(abs(a - e), 1L, max) / pmax(apply(abs(e), 1L, max), floor))
}
# queries whose pairs are all clear of a compact kernel's edge and of a
# cusp (squared whitened distances t, 100 queries at a time)
clear_queries <- function(fit, q) {
  if (fit$kernel == "gaussian") return(q)
  zq <- kdegpu:::whiten(fit, q)
  z2 <- rowSums(fit$z^2)
  keep <- logical(nrow(q))
  for (at in seq(1L, nrow(q), by = 100L)) {
    rows <- at:min(nrow(q), at + 99L)
    t2 <- outer(rowSums(zq[rows, , drop = FALSE]^2), z2, "+") -
      2 * tcrossprod(zq[rows, , drop = FALSE], fit$z)
    edge <- if (fit$kernel == "exponential") TRUE else rowSums(abs(t2 - 1) <= 1e-4) == 0
    cusp <- if (fit$kernel %in% c("triangular", "exponential")) rowSums(t2 <= 0.02^2) == 0 else TRUE
    keep[rows] <- edge & cusp
  }
  q[keep, , drop = FALSE]
}
set.seed(1)
n2 <- 2e5
x <- matrix(rnorm(n2 * 3), ncol = 3)
q0 <- x[sample.int(n2, 2000L), ] + matrix(rnorm(6000, sd = 0.3), ncol = 3)
cat(sprintf("%-13s %-6s %10s %10s %10s %7s  %s\n", "kernel", "prec", "gradient", "Hessian",
            "score", "queries", "verdict"))
for (kernel in c("gaussian", "epanechnikov", "triangular", "biweight", "cosine", "optcosine",
                 "exponential")) {
  cpu <- kde_gpu(x, kernel = kernel, backend = "cpu")
  q <- clear_queries(cpu, q0)
  f <- predict(cpu, q, tolerance = 0)
  bw <- sqrt(min(eigen(cpu$H, symmetric = TRUE, only.values = TRUE)$values))
  ref <- list(gradient = predict(cpu, q, type = "gradient"),
              hessian = predict(cpu, q, type = "hessian"),
              score = predict(cpu, q, type = "gradient", log = TRUE))
  floor <- list(gradient = pmax(f, 1e-300) / bw, hessian = pmax(f, 1e-300) / bw^2,
                score = rep(1 / bw, nrow(q)))
  for (precision in c("double", "single")) {
    gpu <- kde_gpu(x, kernel = kernel, backend = "cuda", precision = precision)
    got <- list(gradient = predict(gpu, q, type = "gradient"),
                hessian = predict(gpu, q, type = "hessian"),
                score = predict(gpu, q, type = "gradient", log = TRUE))
    err <- vapply(names(ref), function(k) point_err(got[[k]], ref[[k]], floor[[k]]), 0)
    limit <- if (precision == "double") 1e-10 else 1e-4
    cat(sprintf("%-13s %-6s %10.2e %10.2e %10.2e %7d  %s\n", kernel, precision, err[[1]],
                err[[2]], err[[3]], nrow(q), verdict(all(is.finite(err)) && all(err <= limit))))
    kdegpu:::release_device_copy(gpu)
  }
}
cat(elapsed(), "\n")

# ---- 3. kde_modes, cuda vs cpu --------------------------------------------------
cat("\n3. kde_modes on three clusters (1e5 points, 2000 starts), cuda vs cpu\n")
set.seed(3)
centres <- matrix(c(-3, 0, 3, 0, 3, 0), ncol = 2)
x <- centres[sample(3, 1e5, TRUE), ] + matrix(rnorm(2e5), ncol = 2)
starts <- x[seq_len(2000L), ]
t_cpu <- system.time(m_cpu <- kde_modes(kde_gpu(x, backend = "cpu"), start = starts))[["elapsed"]]
cat(sprintf("cpu: %d modes, tol %.2e, merge_tol %.3f, %d did not converge (%.1f s)\n",
            nrow(m_cpu$modes), m_cpu$tol, m_cpu$merge_tol, sum(!m_cpu$converged), t_cpu))
same_partition <- function(a, b) {
  tab <- table(a, b)
  all(rowSums(tab > 0) == 1L) && all(colSums(tab > 0) == 1L)
}
for (precision in c("double", "single")) {
  fit <- kde_gpu(x, backend = "cuda", precision = precision)
  t_gpu <- system.time(m_gpu <- kde_modes(fit, start = starts))[["elapsed"]]
  moved <- max(sqrt(rowSums((m_gpu$end_points - m_cpu$end_points)^2)))
  same <- nrow(m_gpu$modes) == nrow(m_cpu$modes) && same_partition(m_gpu$label, m_cpu$label)
  # single precision: its end points may differ by its rounding; the count
  # and partition are reported, not required
  ok <- if (precision == "double") same && moved < 1e-3 * m_cpu$tol else TRUE
  cat(sprintf("cuda %-6s: %d modes, same partition %s, end points within %.2e (%.2e of tol), %.1f s  %s\n",
              precision, nrow(m_gpu$modes), same, moved, moved / m_cpu$tol, t_gpu, verdict(ok)))
  kdegpu:::release_device_copy(fit)
}
cat(elapsed(), "\n")

# ---- 4. timings ------------------------------------------------------------
cat("\n4. timings (median of 3, as bench/derivatives.R)\n")
record <- function(task, d, n, m, precision, seconds, relative = NA_real_) {
  cat(sprintf("%-26s d=%-2d n=%-7.0e m=%-7.0e %-6s %9.3f s %s\n", task, d, n, m, precision,
              seconds, if (is.na(relative)) "" else sprintf("(%.2fx density)", relative)))
}
n <- 1e6
set.seed(2)
x <- matrix(rnorm(n * 3), ncol = 3)
for (case in list(c("gaussian", "single"), c("epanechnikov", "single"),
                  c("exponential", "single"), c("gaussian", "double"))) {
  kernel <- case[[1L]]
  precision <- case[[2L]]
  tag <- if (kernel == "gaussian") "" else sprintf(" (%s)", kernel)
  fit <- kde_gpu(x, kernel = kernel, backend = "cuda", precision = precision)
  density <- median_seconds(function() predict(fit, x), reps = 3L)
  record(paste0("density", tag), 3L, n, n, precision, density, 1)
  for (type in c("gradient", "hessian")) {
    s <- median_seconds(function() predict(fit, x, type = type), reps = 3L)
    record(paste0(type, tag), 3L, n, n, precision, s, s / density)
  }
  s <- median_seconds(function() predict(fit, x, type = "gradient", log = TRUE), reps = 3L)
  record(paste0("score", tag), 3L, n, n, precision, s, s / density)
  kdegpu:::release_device_copy(fit)
}
set.seed(3)
x <- centres[sample(3, n, TRUE), ] + matrix(rnorm(2 * n), ncol = 2)
fit <- kde_gpu(x, backend = "cuda", precision = "double")
s <- system.time(modes <- kde_modes(fit, start = x[seq_len(1e4), ]))[["elapsed"]]
record(sprintf("kde_modes (%d modes)", nrow(modes$modes)), 2L, n, 1e4, "double", s)
kdegpu:::release_device_copy(fit)
set.seed(4)
x <- matrix(rnorm(1e6 * 16), ncol = 16)
q <- matrix(rnorm(131072 * 16), ncol = 16)
s <- system.time({
  fit <- kde_gpu(x, backend = "cuda", precision = "single", debias = TRUE)
  invisible(predict(fit, q))
})[["elapsed"]]
record("SD-KDE fit + predict", 16L, 1e6, 131072, "single", s)
cat(elapsed(), "\n")

cat(sprintf("\ncheck_gpuderiv: %d failures\n", failures))
